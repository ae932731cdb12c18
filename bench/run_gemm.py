#!/usr/bin/env python3
"""One float32 product x [M, K] x W [K, N] (W a constant initializer) per row, timed in onyx
(oneDNN's matmul, W packed once) and in ONNX Runtime (MLAS) side by side, with the GFLOP/s
each reaches: whether a model's gap to ORT lies in its matrix products, on the host at hand.

With --from-memory, a chain instead: the four products (and bias Adds) of each of 12
BERT-base layers, 340 MB of weights that no cache holds, so each run reads them from memory as a
transformer's inference does; times per row count (--rows), GFLOP/s over the chain.

Usage: run_gemm.py --onyx-bench build/bench/onyx_bench [--threads 1] [--iters 200]
                   [--shapes 32x1024x1024 128x3072x768 ...]
       run_gemm.py --onyx-bench build/bench/onyx_bench --from-memory [--rows 8 32 64 128]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_bench import time_loop  # noqa: E402

# M x N x K: the MLP's layers at batch 32 and 8, BERT-base's and GPT-2-small's at seq 128 and 64.
DEFAULT_SHAPES = ["8x1024x1024", "32x1024x784", "32x1024x1024", "64x1024x1024",
                  "64x3072x768", "64x768x3072", "128x1024x1024", "128x3072x768",
                  "128x768x3072", "128x2304x768"]


def write_model(path, M, N, K):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                     ir_version=8), path)
    return rng.standard_normal((M, K)).astype(np.float32)


# [K, N] of a BERT-base layer's products: QKV, attention output, feed-forward in and out.
BERT_LAYER = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]


def write_chain(path, layers=12):
    """x [rows, 768] through `layers` BERT-base layers' products, each + its bias; the weights
    in an external file (as exporters write models over 2 GB). Returns the chain's
    multiply-adds per row."""
    rng = np.random.default_rng(0)
    nodes, inits, h, macs = [], [], "x", 0
    for layer in range(layers):
        for j, (k, n) in enumerate(BERT_LAYER):
            # Each product reads the one before; QKV's 2304 columns go on as their first 768
            # (a Slice) since the next product's K is 768.
            w, b, y = f"w{layer}_{j}", f"b{layer}_{j}", f"y{layer}_{j}"
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), w))
            inits.append(numpy_helper.from_array(np.zeros(n, np.float32), b))
            nodes.append(helper.make_node("MatMul", [h, w], [y + "_mm"]))
            nodes.append(helper.make_node("Add", [y + "_mm", b], [y]))
            h, macs = y, macs + k * n
            if n == 2304:
                nodes.append(helper.make_node("Slice", [h, "zero", "d768", "one"], [y + "_q"]))
                h = y + "_q"
    inits += [numpy_helper.from_array(np.array([v], np.int64), name)
              for name, v in (("zero", 0), ("d768", 768), ("one", 1))]
    graph = helper.make_graph(
        nodes, "bert_products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 768])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["rows", 768])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path, save_as_external_data=True, location=os.path.basename(path) + ".data")
    return macs


def onyx_ms(args, model, inputs):
    p = subprocess.run([args.onyx_bench, "--model", model, "--inputs", inputs, "--threads",
                        str(args.threads), "--warmup", "5", "--iters", str(args.iters),
                        "--max-seconds", "10"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"onyx_bench failed: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["median_ms"]


def ort_ms(args, model, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    times = time_loop(lambda: sess.run(None, {"x": x}), 5, args.iters, 10)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onyx-bench", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES, help="MxNxK ...")
    ap.add_argument("--from-memory", action="store_true",
                    help="12 BERT-base layers' products, weights read from memory each run")
    ap.add_argument("--rows", nargs="+", type=int, default=[8, 32, 64, 128],
                    help="row counts for --from-memory")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="onyx_gemm_")
    if args.from_memory:
        return from_memory(args, work)
    print(f"threads {args.threads}, medians of up to {args.iters} runs, ms "
          f"(GFLOP/s in brackets); load average {os.getloadavg()[0]:.2f} at start")
    head = ["M x N x K", "onyx", "ORT", "onyx/ORT"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for shape in args.shapes:
        M, N, K = (int(v) for v in shape.split("x"))
        model = os.path.join(work, f"{shape}.onnx")
        x = write_model(model, M, N, K)
        inputs = os.path.join(work, shape)
        os.makedirs(inputs, exist_ok=True)
        with open(os.path.join(inputs, "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())
        onyx_t, ort_t = onyx_ms(args, model, inputs), ort_ms(args, model, x)
        gf = lambda ms: 2.0 * M * N * K / ms / 1e6  # noqa: E731
        print(f"| {shape} | {onyx_t:.3f} ({gf(onyx_t):.0f}) | {ort_t:.3f} ({gf(ort_t):.0f}) | "
              f"{onyx_t / ort_t:.2f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


def from_memory(args, work):
    model = os.path.join(work, "bert_products.onnx")
    macs = write_chain(model)
    print(f"12 BERT-base layers' products (340 MB of weights), threads {args.threads}, medians "
          f"of up to {args.iters} runs, ms (GFLOP/s in brackets); load average "
          f"{os.getloadavg()[0]:.2f} at start")
    head = ["rows", "onyx", "ORT", "onyx/ORT"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for rows in args.rows:
        x = np.random.default_rng(rows).standard_normal((rows, 768)).astype(np.float32)
        inputs = os.path.join(work, f"rows{rows}")
        os.makedirs(inputs, exist_ok=True)
        with open(os.path.join(inputs, "input_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(x, "x").SerializeToString())
        onyx_t, ort_t = onyx_ms(args, model, inputs), ort_ms(args, model, x)
        gf = lambda ms: 2.0 * rows * macs / ms / 1e6  # noqa: E731
        print(f"| {rows} | {onyx_t:.2f} ({gf(onyx_t):.0f}) | {ort_t:.2f} ({gf(ort_t):.0f}) | "
              f"{onyx_t / ort_t:.2f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
