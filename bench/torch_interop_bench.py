#!/usr/bin/env python3
"""Times onyx's Python package against ONNX Runtime's from Python, call by call.

Inference: onyx.InferenceSession.run next to onnxruntime.InferenceSession.run on the models of
gen_bench_models.py, both in this process, with the same inputs (numpy arrays, so both pay
their Python call and conversion overhead), the same intra-op thread count, ORT sequential with
one inter-op thread, all graph optimizations on both. Each side runs --warmup untimed calls,
then up to --iters timed calls (fewer when --max-seconds would be exceeded; never fewer than
3); the table shows the medians and onyx/ORT. The last column is the largest difference
between the two runtimes' outputs, max |onyx - ort| / max(1, |ort|).

A first row times a 16-float Relu, whose work is nothing: the cost of a call itself.

Usage: PYTHONPATH=build/python torch_interop_bench.py [--models mlp resnet18] [--threads 2] ...
(bench/run_torch_interop.sh builds the package and sets the path.)
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_bench_models  # noqa: E402
from run_bench import declared_shapes, fmt_row, make_inputs, time_loop  # noqa: E402


def sessions(model_path, threads):
    import onnxruntime as ort

    import onyx
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    ort_sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    oo = onyx.SessionOptions()
    oo.intra_op_num_threads = threads
    oo.graph_optimization_level = onyx.GraphOptimizationLevel.ORT_ENABLE_ALL
    onyx_sess = onyx.InferenceSession(model_path, oo, providers=["CPUExecutionProvider"])
    return onyx_sess, ort_sess


def max_rel_diff(got, want):
    worst = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w) / np.maximum(1.0, np.abs(w)))))
    return worst


def overhead_row(args):
    """The cost of a call itself: Relu over 16 floats, where the model's work is nothing."""
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onyx_sess, ort_sess = sessions(model.SerializeToString(), args.threads)
    feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32)}
    iters = max(args.iters, 1000)
    ort_ms = time_loop(lambda: ort_sess.run(None, feeds), args.warmup, iters, args.max_seconds)
    onyx_ms = time_loop(lambda: onyx_sess.run(None, feeds), args.warmup, iters, args.max_seconds)
    return {"model": "relu16 (call overhead)", "batch": 1, "onyx_ms": statistics.median(onyx_ms),
            "ort_ms": statistics.median(ort_ms), "runs": (len(onyx_ms), len(ort_ms)),
            "diff": max_rel_diff(onyx_sess.run(None, feeds), ort_sess.run(None, feeds))}


def inference_rows(args):
    rows = [overhead_row(args)]
    for name in args.models:
        gen_bench_models.generate(args.models_dir, name)
        model_path = os.path.join(args.models_dir, name, "model.onnx")
        with open(os.path.join(args.models_dir, name, "meta.json")) as f:
            meta = json.load(f)
        meta["shapes"] = declared_shapes(model_path)
        onyx_sess, ort_sess = sessions(model_path, args.threads)
        for batch in args.batches or meta["batches"]:
            feeds = make_inputs(meta, batch, 7 + batch)
            t0 = time.time()
            want = ort_sess.run(None, feeds)
            got = onyx_sess.run(None, feeds)
            # The two runs above are each side's first warm-up run.
            ort_ms = time_loop(lambda: ort_sess.run(None, feeds), args.warmup - 1, args.iters,
                               args.max_seconds)
            onyx_ms = time_loop(lambda: onyx_sess.run(None, feeds), args.warmup - 1, args.iters,
                                args.max_seconds)
            rows.append({"model": name, "batch": batch, "onyx_ms": statistics.median(onyx_ms),
                         "ort_ms": statistics.median(ort_ms), "runs": (len(onyx_ms), len(ort_ms)),
                         "diff": max_rel_diff(got, want)})
            print(f"  {name} batch {batch} done ({time.time() - t0:.0f}s)", flush=True)
        del onyx_sess, ort_sess
    return rows


def print_inference_table(rows):
    head = ["model", "batch", "onyx ms", "ORT ms", "onyx/ORT", "runs onyx/ORT", "max diff"]
    table = [[r["model"], r["batch"], f"{r['onyx_ms']:.4g}", f"{r['ort_ms']:.4g}",
              f"{r['onyx_ms'] / r['ort_ms']:.2f}", f"{r['runs'][0]}/{r['runs'][1]}",
              f"{r['diff']:.1e}"] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
    print("\nInference: median latency of one InferenceSession.run call from Python")
    print(fmt_row(head, widths))
    print("-+-".join("-" * w for w in widths))
    for t in table:
        print(fmt_row(t, widths))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=["mlp", "resnet18"],
                    choices=list(gen_bench_models.MODELS))
    ap.add_argument("--models-dir", default=gen_bench_models.DEFAULT_OUT)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads for both")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls first (at least 1)")
    ap.add_argument("--iters", type=int, default=200, help="timed calls (at most)")
    ap.add_argument("--max-seconds", type=float, default=10.0,
                    help="stop timing a row after this long (at least 3 calls)")
    ap.add_argument("--batches", type=int, nargs="*",
                    help="batch sizes to time (default: each model's own)")
    args = ap.parse_args()
    args.warmup = max(1, args.warmup)

    import onnxruntime as ort

    import onyx
    print(f"threads {args.threads}, warm-up {args.warmup}, up to {args.iters} timed calls or "
          f"{args.max_seconds:g}s per row; onnxruntime {ort.__version__}, onyx {onyx.__version__} "
          f"({os.path.dirname(onyx.__file__)})", flush=True)
    load_before = os.getloadavg()[0]
    rows = inference_rows(args)
    print_inference_table(rows)

    load_after = os.getloadavg()[0]
    busy = load_before > 1.0 or load_after > args.threads + 1.0
    print(f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after, "
          f"{os.cpu_count()} cores" + ("; other work was running: timings are unreliable"
                                       if busy else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
