#!/usr/bin/env python3
"""Times onyx and ONNX Runtime side by side on the models of gen_bench_models.py.

For each model and batch size it writes one fixed-seed input set, then times ONNX Runtime
(in this process: CPU provider, sequential execution, --threads intra-op threads, one
inter-op thread, all graph optimizations) and onyx (bench/onyx_bench, a separate process,
same thread count), each with --warmup untimed runs followed by up to --iters timed runs
(fewer when --max-seconds would be exceeded; never fewer than 3). It prints one table of
median latencies and, for batches above 1, throughput; "max diff" is the largest difference
between the two runtimes' outputs, max |onyx - ort| / max(1, |ort|); "first result" is session
creation plus the first run of a model's first batch, each runtime in a fresh process.

Usage: run_bench.py --onyx-bench build/bench/onyx_bench [--threads 2] [--iters 20] ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_bench_models  # noqa: E402
import gen_quant_bench_models  # noqa: E402
import gen_torch_bench_models  # noqa: E402

# The hand-written graphs, the same shapes as torch.onnx exports them, and int8 versions of
# those exports made with onnxruntime.quantization; `bench`, `torch` and `quant` select one
# group (quant is not in the default run).
GENERATORS = {**{n: gen_bench_models for n in gen_bench_models.MODELS},
              **{n: gen_torch_bench_models for n in gen_torch_bench_models.MODELS},
              **{n: gen_quant_bench_models for n in gen_quant_bench_models.MODELS}}
GROUPS = {"bench": list(gen_bench_models.MODELS), "torch": list(gen_torch_bench_models.MODELS),
          "quant": list(gen_quant_bench_models.MODELS)}


def make_inputs(meta, batch, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in meta["inputs"]:
        spec = meta["feeds"][name]
        shape = meta["shapes"][name]
        shape = [batch if isinstance(d, str) else d for d in shape]
        if spec["kind"] == "normal":
            feeds[name] = rng.standard_normal(shape, dtype=np.float32)
        elif spec["kind"] == "ids":
            feeds[name] = rng.integers(0, spec["high"], shape, dtype=np.int64)
        elif spec["kind"] == "ones":
            feeds[name] = np.ones(shape, np.int64)
        else:
            raise ValueError(f"unknown input kind {spec['kind']}")
    return feeds


def declared_shapes(model_path):
    m = onnx.load(model_path, load_external_data=False)
    return {i.name: [d.dim_param if d.dim_param else d.dim_value
                     for d in i.type.tensor_type.shape.dim] for i in m.graph.input}


def time_loop(fn, warmup, iters, max_seconds):
    for _ in range(warmup):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < iters:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= 3 and time.perf_counter() - start > max_seconds:
            break
    return times


def run_ort(model_path, feeds_by_batch, args):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    results = {}
    for batch, feeds in feeds_by_batch.items():
        outs = sess.run(None, feeds)  # the first warm-up run, as in onyx_bench
        times = time_loop(lambda: sess.run(None, feeds), args.warmup - 1, args.iters,
                          args.max_seconds)
        results[batch] = (times, outs)
    return results


# ONNX Runtime's session creation + first run, timed in a fresh Python process (after the
# import, as onyx_bench's clock starts after its process started): in this process ORT would
# reuse the heap onnx.load and the earlier sessions already faulted in, which onyx_bench,
# always a fresh process, cannot (2x on GPT-2-small's 650 MB of weights on our VMs).
ORT_FIRST = """
import json, sys, time
import numpy as np, onnxruntime as ort
feeds = dict(np.load(sys.argv[2]))
so = ort.SessionOptions()
so.intra_op_num_threads = int(sys.argv[3])
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
t0 = time.perf_counter()
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
sess.run(None, feeds)
print(json.dumps({"first_ms": (time.perf_counter() - t0) * 1e3}))
"""


def ort_first_result(model_path, feeds, work, args):
    """ORT's creation + first run in ms, in a fresh process; None when it fails."""
    path = os.path.join(work, "ort_first_feeds.npz")
    np.savez(path, **feeds)
    p = subprocess.run([sys.executable, "-c", ORT_FIRST, model_path, path, str(args.threads)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])["first_ms"]


def run_onyx(model_path, input_dir, out_dir, args, precision=None):
    cmd = [args.onyx_bench, "--model", model_path, "--inputs", input_dir, "--threads",
           str(args.threads), "--warmup", str(args.warmup), "--iters", str(args.iters),
           "--max-seconds", str(args.max_seconds), "--opt-level", args.opt_level,
           "--save-outputs", out_dir, "--precision", precision or "fp32"]
    if args.profile:
        cmd += ["--profile", os.path.join(out_dir, "profile.json")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}").splitlines()
        return None, lines[-1][:160]
    return json.loads(p.stdout.strip().splitlines()[-1]), None


def profile_summary(path, top=6):
    """'Conv 61%, Add 9%, ...': onyx's time by op type over the profiled runs."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    by_op = {}
    for e in events:
        if e.get("cat") == "node":
            op = e.get("args", {}).get("op", e["name"])
            by_op[op] = by_op.get(op, 0) + e["dur"]
    total = sum(by_op.values()) or 1
    worst = sorted(by_op.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{op} {100 * t / total:.0f}%" for op, t in worst)


def max_rel_diff(onyx_dir, ort_outs):
    worst = 0.0
    for i, want in enumerate(ort_outs):
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(onyx_dir, f"output_{i}.pb")))
        if got.shape != want.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want) /
                                        np.maximum(1.0, np.abs(want)))))
    return worst


def first_result(row):
    """'870 / 1401 = 0.62': session creation plus first run, onyx / ORT, ms (a model's first
    batch only)."""
    onyx, ort = row.get("onyx_first_ms"), row["ort_first_ms"]
    if onyx is None or ort is None:
        return ""
    return f"{onyx:.0f} / {ort:.0f} = {onyx / ort:.2f}"


def fmt_row(cells, widths):
    return " | ".join(str(c).rjust(w) if i else str(c).ljust(w)
                      for i, (c, w) in enumerate(zip(cells, widths)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onyx-bench", help="path of the onyx_bench binary (omit: ORT only)")
    ap.add_argument("--models", nargs="*", default=["bench", "torch"],
                    choices=list(GENERATORS) + list(GROUPS),
                    help="models or groups (bench: hand-written graphs, torch: torch.onnx "
                         "exports of the same shapes); default both groups")
    ap.add_argument("--models-dir", default=gen_bench_models.DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads for both")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (at least 1)")
    ap.add_argument("--iters", type=int, default=20, help="timed runs (at most)")
    ap.add_argument("--max-seconds", type=float, default=15.0,
                    help="stop timing a row after this long (at least 3 runs)")
    ap.add_argument("--batches", type=int, nargs="*",
                    help="batch sizes to time (default: each model's own, 1 and 32)")
    ap.add_argument("--opt-level", default="all", help="onyx optimization level")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="bf16/fp16: onyx also runs in that precision (SessionOptions::precision); "
                         "the table adds its time, its speed-up over onyx float32 and its "
                         "largest difference from ONNX Runtime's float32 outputs")
    ap.add_argument("--json", help="also write the rows as JSON to this file")
    ap.add_argument("--profile", action="store_true",
                    help="profile onyx's runs and print its time by op type (slows onyx)")
    args = ap.parse_args()
    args.warmup = max(1, args.warmup)
    args.models = list(dict.fromkeys(m for name in args.models for m in GROUPS.get(name, [name])))

    import onnxruntime as ort
    print(f"threads {args.threads}, warm-up {args.warmup}, up to {args.iters} timed runs "
          f"or {args.max_seconds:g}s per row; onnxruntime {ort.__version__}; "
          f"onyx {'opt-level ' + args.opt_level if args.onyx_bench else 'not run'}",
          flush=True)
    load_before = os.getloadavg()[0]
    for name in args.models:
        GENERATORS[name].generate(args.models_dir, name)

    rows, work = [], tempfile.mkdtemp(prefix="onyx_bench_")
    for name in args.models:
        model_path = os.path.join(args.models_dir, name, "model.onnx")
        with open(os.path.join(args.models_dir, name, "meta.json")) as f:
            meta = json.load(f)
        meta["shapes"] = declared_shapes(model_path)
        batches = args.batches or meta["batches"]
        feeds_by_batch = {bs: make_inputs(meta, bs, 7 + bs) for bs in batches}
        t0 = time.time()
        ort_res = run_ort(model_path, feeds_by_batch, args)
        print(f"  {name}: onnxruntime done ({time.time() - t0:.0f}s)", flush=True)
        for bs, feeds in feeds_by_batch.items():
            ort_times, ort_outs = ort_res[bs]
            # Creation + first run is compared for a model's first batch only, each side in a
            # fresh process, one right after the other.
            ort_first = (ort_first_result(model_path, feeds, work, args)
                         if args.onyx_bench and bs == batches[0] else None)
            row = {"model": name, "batch": bs, "ort_ms": statistics.median(ort_times),
                   "ort_first_ms": ort_first, "onyx_first_ms": None,
                   "ort_runs": len(ort_times), "onyx_ms": None, "onyx_runs": 0, "diff": None,
                   "error": None}
            if args.onyx_bench:
                in_dir = os.path.join(work, f"{name}_b{bs}_in")
                out_dir = os.path.join(work, f"{name}_b{bs}_out")
                os.makedirs(in_dir)
                os.makedirs(out_dir)
                for i, n in enumerate(meta["inputs"]):
                    onnx.save_tensor(numpy_helper.from_array(feeds[n], n),
                                     os.path.join(in_dir, f"input_{i}.pb"))
                t0 = time.time()
                res, err = run_onyx(model_path, in_dir, out_dir, args)
                if res:
                    row.update(onyx_ms=res["median_ms"], onyx_runs=res["runs"],
                               onyx_load_ms=res.get("load_ms"),
                               onyx_first_ms=res["load_ms"] + res["first_run_ms"],
                               diff=max_rel_diff(out_dir, ort_outs))
                    if args.profile:
                        row["profile"] = profile_summary(os.path.join(out_dir, "profile.json"))
                else:
                    row["error"] = err
                print(f"  {name} batch {bs}: onyx {'done' if res else 'FAILED'} "
                      f"({time.time() - t0:.0f}s)", flush=True)
                if args.precision != "fp32":
                    low_dir = os.path.join(work, f"{name}_b{bs}_out_{args.precision}")
                    os.makedirs(low_dir)
                    low, err = run_onyx(model_path, in_dir, low_dir, args, args.precision)
                    row["low_ms"] = low["median_ms"] if low else None
                    row["low_diff"] = max_rel_diff(low_dir, ort_outs) if low else None
                    if err:
                        row["error"] = f"{args.precision}: {err}"
            rows.append(row)

    head = ["model", "batch", "onyx median ms", "ORT median ms", "onyx/ORT", "onyx items/s",
            "ORT items/s", "runs onyx/ORT", "max diff", "first result onyx/ORT ms"]
    p = args.precision
    if p != "fp32":
        head += [f"onyx {p} ms", f"{p} speed-up", f"{p}/ORT", f"{p} max diff"]
    table = []
    for r in rows:
        onyx_ms = r["onyx_ms"]
        tput = lambda ms: f"{r['batch'] * 1e3 / ms:.1f}" if ms and r["batch"] > 1 else ""
        table.append([r["model"], r["batch"],
                      f"{onyx_ms:.2f}" if onyx_ms else ("failed" if r["error"] else "-"),
                      f"{r['ort_ms']:.2f}", f"{onyx_ms / r['ort_ms']:.2f}" if onyx_ms else "",
                      tput(onyx_ms), tput(r["ort_ms"]), f"{r['onyx_runs']}/{r['ort_runs']}",
                      f"{r['diff']:.1e}" if r["diff"] is not None else "",
                      first_result(r)])
        if p != "fp32":
            low = r.get("low_ms")
            table[-1] += [f"{low:.2f}" if low else "failed",
                          f"{onyx_ms / low:.2f}" if low and onyx_ms else "",
                          f"{low / r['ort_ms']:.2f}" if low else "",
                          f"{r['low_diff']:.1e}" if r.get("low_diff") is not None else ""]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
    print()
    print(fmt_row(head, widths))
    print("-+-".join("-" * w for w in widths))
    for t in table:
        print(fmt_row(t, widths))
    for group, names in GROUPS.items():
        ratios = {}
        for r in rows:
            if r["model"] in names and r["onyx_ms"]:
                ratios.setdefault(r["batch"], []).append(r["onyx_ms"] / r["ort_ms"])
        for bs, rs in sorted(ratios.items()):
            if len(rs) > 1:
                print(f"geo-mean onyx/ORT, {group} models, batch {bs}: "
                      f"{statistics.geometric_mean(rs):.2f} over {len(rs)} models, "
                      f"worst {max(rs):.2f}")
    load_after = os.getloadavg()[0]
    # Before the run only others count; after it, our own threads count too.
    busy = load_before > 1.0 or load_after > args.threads + 1.0
    print(f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after, "
          f"{os.cpu_count()} cores" + ("; other work was running: timings are unreliable"
                                       if busy else ""))
    for r in rows:
        if r.get("profile"):
            print(f"onyx time by op, {r['model']} batch {r['batch']}: {r['profile']}")
    for r in rows:
        if r["error"]:
            print(f"onyx failed on {r['model']} batch {r['batch']}: {r['error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
