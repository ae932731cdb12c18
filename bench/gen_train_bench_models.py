#!/usr/bin/env python3
"""Writes the training-benchmark models and one fixed batch each into bench/models/train/<name>/.

    mlp       784-512-512-10, Gemm + Relu; x float [64, 784], 10 classes
    resnet18  ResNet-18 shape at 64x64 (7x7/2 stem, max pool, 4 stages of 2 BasicBlocks,
              Conv + BatchNormalization + Relu, global average pool, fc 512-1000);
              x float [16, 3, 64, 64], 1000 classes
    bert      BERT-small-shaped encoder: vocab 30522, 4 post-LN layers, hidden 512, 8 heads,
              FFN 2048, erf GELU, seq 128; [CLS] -> dense + Tanh pooler -> 2 classes;
              input_ids int64 [8, 128]

The graphs are written the way torch.onnx exports the equivalent modules at opset 17 (Linear
on 3-D input as MatMul + Add, GELU spelled out with Erf, attention as Reshape/Transpose/MatMul/
Softmax), with fixed-seed random weights. Every initializer is named after the PyTorch
state_dict entry it holds, so bench/train_bench_torch.py loads the very same weights into its
modules; meta.json lists the initializers stored transposed (MatMul weights, [in, out]).

Per model folder: model.onnx, <input>.pb for each batch input (TensorProto; "labels" is the
int64 class index), meta.json (batch, inputs, transposed weights) and a VERSION stamp. A model
is rebuilt only when its stamp does not match this script's VERSION.

Usage: gen_train_bench_models.py [--out DIR] [--only NAME ...]
"""
import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gen_char_lm import Graph  # noqa: E402  (named initializers, generated node names)

VERSION = "1"
OPSET = 17
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "train")


def linear_gemm(g, x, name, din, dout):
    """nn.Linear on [N, din]: Gemm with the weight in PyTorch's [out, in] layout."""
    w = g.param(f"{name}.weight", (dout, din), 1.0 / math.sqrt(din))
    b = g.param(f"{name}.bias", (dout,), 0.0)
    return g.op("Gemm", [x, w, b], transB=1)


def mlp(g):
    h = "x"
    for i, (din, dout) in enumerate([(784, 512), (512, 512)]):
        h = g.op("Relu", [linear_gemm(g, h, f"fc{i + 1}", din, dout)])
    g.op("Identity", [linear_gemm(g, h, "fc3", 512, 10)], out="logits")
    batch = 64
    rng = np.random.default_rng(100)
    data = {"x": rng.standard_normal((batch, 784)).astype(np.float32),
            "labels": rng.integers(0, 10, batch).astype(np.int64)}
    inputs = [("x", TensorProto.FLOAT, [batch, 784])]
    return inputs, ("logits", [batch, 10]), data, []


def conv_bn(g, x, name, bn, cin, cout, k, stride, relu=True):
    w = g.param(f"{name}.weight", (cout, cin, k, k), math.sqrt(2.0 / (cin * k * k)))
    y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4)
    # PyTorch's BatchNorm2d(momentum=0.1) is ONNX momentum 0.9; running var starts at 1.
    stats = [g.ones(f"{bn}.weight", (cout,)), g.param(f"{bn}.bias", (cout,), 0.0),
             g.param(f"{bn}.running_mean", (cout,), 0.0), g.ones(f"{bn}.running_var", (cout,))]
    y = g.op("BatchNormalization", [y] + stats, epsilon=1e-5, momentum=0.9)
    return g.op("Relu", [y]) if relu else y


def resnet18(g, batch=16, size=64, classes=1000):
    h = conv_bn(g, "x", "conv1", "bn1", 3, 64, 7, 2)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for stage in range(4):
        cout = 64 * 2 ** stage
        for i in range(2):
            p = f"layer{stage + 1}.{i}"
            stride = 2 if stage > 0 and i == 0 else 1
            y = conv_bn(g, h, f"{p}.conv1", f"{p}.bn1", cin, cout, 3, stride)
            y = conv_bn(g, y, f"{p}.conv2", f"{p}.bn2", cout, cout, 3, 1, relu=False)
            skip = h
            if stride != 1 or cin != cout:
                skip = conv_bn(g, h, f"{p}.downsample.0", f"{p}.downsample.1", cin, cout, 1,
                               stride, relu=False)
            h = g.op("Relu", [g.op("Add", [y, skip])])
            cin = cout
    h = g.op("Flatten", [g.op("GlobalAveragePool", [h])], axis=1)
    g.op("Identity", [linear_gemm(g, h, "fc", 512, classes)], out="logits")
    rng = np.random.default_rng(101)
    data = {"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32),
            "labels": rng.integers(0, classes, batch).astype(np.int64)}
    inputs = [("x", TensorProto.FLOAT, [batch, 3, size, size])]
    return inputs, ("logits", [batch, classes]), data, []


def bert(g, batch=8, seq=128, vocab=30522, hidden=512, layers=4, heads=8, ffn=2048, classes=2):
    transposed = []
    dh = hidden // heads
    split = g.const("split_heads_shape", np.array([0, 0, heads, dh], np.int64))
    merge = g.const("merge_heads_shape", np.array([0, 0, hidden], np.int64))
    sqrt_dh, sqrt2, one, half = (g.const(n, np.array(v, np.float32)) for n, v in (
        ("sqrt_dh", math.sqrt(dh)), ("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5)))

    def linear(x, name, din, dout):  # nn.Linear on [B, S, din]: MatMul by W^T + bias
        transposed.append(f"{name}.weight")
        w = g.param(f"{name}.weight", (din, dout), 0.02)
        return g.op("Add", [g.op("MatMul", [x, w]), g.param(f"{name}.bias", (dout,), 0.0)])

    def layer_norm(x, name, eps=1e-12):
        return g.op("LayerNormalization", [x, g.ones(f"{name}.weight", (hidden,)),
                                           g.param(f"{name}.bias", (hidden,), 0.0)],
                    axis=-1, epsilon=eps)

    def heads_of(x, perm):
        return g.op("Transpose", [g.op("Reshape", [x, split])], perm=perm)

    h = g.op("Gather", [g.param("embeddings.word.weight", (vocab, hidden), 0.02), "input_ids"])
    h = g.op("Add", [h, g.param("embeddings.position", (seq, hidden), 0.02)])
    h = layer_norm(h, "embeddings.norm")
    for l in range(layers):
        p = f"layers.{l}"
        q = heads_of(linear(h, f"{p}.q", hidden, hidden), [0, 2, 1, 3])
        kt = heads_of(linear(h, f"{p}.k", hidden, hidden), [0, 2, 3, 1])
        v = heads_of(linear(h, f"{p}.v", hidden, hidden), [0, 2, 1, 3])
        s = g.op("Softmax", [g.op("Div", [g.op("MatMul", [q, kt]), sqrt_dh])], axis=-1)
        a = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [s, v])], perm=[0, 2, 1, 3]),
                             merge])
        h = layer_norm(g.op("Add", [h, linear(a, f"{p}.out", hidden, hidden)]), f"{p}.norm1")
        f = linear(h, f"{p}.ffn1", hidden, ffn)
        f = g.op("Mul", [g.op("Mul", [f, g.op("Add", [g.op("Erf", [g.op("Div", [f, sqrt2])]),
                                                       one])]), half])
        h = layer_norm(g.op("Add", [h, linear(f, f"{p}.ffn2", ffn, hidden)]), f"{p}.norm2")
    cls = g.op("Gather", [h, g.const("cls_index", np.array(0, np.int64))], axis=1)  # [B, H]
    pooled = g.op("Tanh", [linear_gemm(g, cls, "pooler", hidden, hidden)])
    g.op("Identity", [linear_gemm(g, pooled, "classifier", hidden, classes)], out="logits")
    rng = np.random.default_rng(102)
    data = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
            "labels": rng.integers(0, classes, batch).astype(np.int64)}
    inputs = [("input_ids", TensorProto.INT64, [batch, seq])]
    return inputs, ("logits", [batch, classes]), data, transposed


MODELS = {"mlp": mlp, "resnet18": resnet18, "bert": bert}


def generate(out, name, seed):
    """Builds `name` under `out` unless an up-to-date copy is there."""
    folder = os.path.join(out, name)
    stamp = os.path.join(folder, "VERSION")
    if os.path.exists(stamp) and open(stamp).read().strip() == VERSION:
        return
    g = Graph(seed)
    inputs, (out_name, out_shape), data, transposed = MODELS[name](g)
    graph = helper.make_graph(
        g.nodes, name, [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)], g.inits)
    model = helper.make_model(graph, producer_name="onyx-gen_train_bench_models",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    onnx.save(model, os.path.join(tmp, "model.onnx"))
    for k, v in data.items():
        with open(os.path.join(tmp, f"{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    n_params = int(sum(a.size for a in g.params.values()))
    meta = {"batch": int(next(iter(data.values())).shape[0]), "inputs": [i[0] for i in inputs],
            "labels": "labels", "transposed": transposed, "parameters": n_params}
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(tmp, "VERSION"), "w") as f:
        f.write(VERSION + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    print(f"wrote {folder}: {n_params / 1e6:.2f} M parameters, batch {meta['batch']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="*", choices=list(MODELS), help="models to build")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i, name in enumerate(args.only or MODELS):
        generate(args.out, name, seed=10 + list(MODELS).index(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
