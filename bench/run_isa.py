#!/usr/bin/env python3
"""Times the portable build (run-time ISA dispatch) next to an -march=native build.

The question it answers: does the default build, which targets x86-64-v3 and picks its own
AVX-512 loops at run time, lose speed against ONYX_NATIVE=ON on this machine? For each
model and batch it runs onyx_bench from both builds, plus the portable build held to AVX2
(ONYX_ISA=avx2, what an AVX2-only host runs), interleaved over --rounds rounds so load
drifts hit every column alike, and prints the median of the per-round medians and the
ratio portable/native.

Usage: run_isa.py --portable build/bench/onyx_bench --native build-native/bench/onyx_bench
                  [--models mlp resnet18 ...] [--rounds 3] [--threads 2] [--iters 10]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_bench_models  # noqa: E402
from run_bench import declared_shapes, fmt_row, make_inputs  # noqa: E402


def bench_once(binary, env_extra, model, in_dir, args):
    env = dict(os.environ, **env_extra)
    cmd = [binary, "--model", model, "--inputs", in_dir, "--threads", str(args.threads),
           "--warmup", str(args.warmup), "--iters", str(args.iters),
           "--max-seconds", str(args.max_seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(p.stderr or p.stdout).strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["median_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--portable", required=True, help="onyx_bench of the default build")
    ap.add_argument("--native", required=True, help="onyx_bench of an ONYX_NATIVE=ON build")
    ap.add_argument("--models", nargs="*", default=list(gen_bench_models.MODELS),
                    choices=list(gen_bench_models.MODELS))
    ap.add_argument("--models-dir", default=gen_bench_models.DEFAULT_OUT)
    ap.add_argument("--batches", type=int, nargs="*", help="default: each model's own")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=10.0)
    args = ap.parse_args()

    variants = [("portable", args.portable, {}), ("native", args.native, {}),
                ("portable avx2", args.portable, {"ONYX_ISA": "avx2"})]
    load_before = os.getloadavg()[0]
    work = tempfile.mkdtemp(prefix="onyx_isa_")
    rows = []
    for name in args.models:
        gen_bench_models.generate(args.models_dir, name)
        model = os.path.join(args.models_dir, name, "model.onnx")
        with open(os.path.join(args.models_dir, name, "meta.json")) as f:
            meta = json.load(f)
        meta["shapes"] = declared_shapes(model)
        for bs in args.batches or meta["batches"]:
            in_dir = os.path.join(work, f"{name}_b{bs}")
            os.makedirs(in_dir)
            for i, (n, a) in enumerate(make_inputs(meta, bs, 7 + bs).items()):
                onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(in_dir, f"input_{i}.pb"))
            times = {v[0]: [] for v in variants}
            for _ in range(args.rounds):
                for label, binary, env in variants:
                    times[label].append(bench_once(binary, env, model, in_dir, args))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append([name, bs, f"{med['portable']:.2f}", f"{med['native']:.2f}",
                         f"{med['portable'] / med['native']:.3f}", f"{med['portable avx2']:.2f}",
                         f"{med['portable avx2'] / med['portable']:.3f}"])
            print(f"  {name} batch {bs} done", flush=True)
    head = ["model", "batch", "portable ms", "native ms", "portable/native",
            "ONYX_ISA=avx2 ms", "avx2/portable"]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print(f"\nthreads {args.threads}; median over {args.rounds} interleaved rounds of each "
          f"build's median of up to {args.iters} runs")
    print(fmt_row(head, widths))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(fmt_row(r, widths))
    print(f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"{os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
