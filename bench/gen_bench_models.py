#!/usr/bin/env python3
"""Writes the benchmark models, with fixed-seed random weights, into bench/models/<name>/.

    mlp        784-1024-1024-1024-10, Gemm + Relu + Softmax
    resnet18   ResNet-18 shape, 3x224x224, Conv + BatchNormalization (unfused) + Relu
    resnet50   ResNet-50 shape (bottleneck, stride on the 3x3 conv as torchvision v1.5)
    bert_base  BERT-base encoder: 12 layers, hidden 768, 12 heads, FFN 3072, seq 128,
               input_ids + attention_mask, erf GELU spelled out as a PyTorch export does
    gpt2_small GPT-2 small decoder: 12 pre-LN layers, hidden 768, causal mask (Where),
               tanh GELU, tied LM head (logits over 50257 tokens), seq 128

Every model has a symbolic batch dimension. Each folder also gets meta.json, which tells
bench/run_bench.py how to make inputs and which batch sizes to time. A model is rebuilt only
when its folder lacks a stamp matching this script's VERSION.

Usage: gen_bench_models.py [--out DIR] [--only NAME ...]
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gen_models import Builder  # noqa: E402

VERSION = "2"
DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
OPSET = 17


def mlp(b):
    h, dims = "x", [784, 1024, 1024, 1024]
    for din, dout in zip(dims, dims[1:]):
        w, _ = b.weight((din, dout), math.sqrt(2.0 / din))
        bias, _ = b.weight((dout,), 0.02)
        h = b.op("Relu", [b.op("Gemm", [h, w, bias])])
    w, _ = b.weight((1024, 10), math.sqrt(1.0 / 1024))
    bias, _ = b.weight((10,), 0.02)
    b.output(b.op("Softmax", [b.op("Gemm", [h, w, bias])], axis=-1), "probs")
    io = ([("x", TensorProto.FLOAT, ["batch", 784])], [("probs", TensorProto.FLOAT, ["batch", 10])])
    return io, {"x": {"kind": "normal"}}, [1, 32]


def conv_bn(b, x, cin, cout, k, stride, relu=True, gamma=1.0):
    w, _ = b.weight((cout, cin, k, k), math.sqrt(2.0 / (cin * k * k)))
    rng = b.rng
    bn = [b.const((gamma * (1.0 + 0.1 * rng.standard_normal(cout))).astype(np.float32)),
          b.const((0.1 * rng.standard_normal(cout)).astype(np.float32)),
          b.const((0.1 * rng.standard_normal(cout)).astype(np.float32)),
          b.const((0.5 + rng.random(cout)).astype(np.float32))]
    y = b.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    y = b.op("BatchNormalization", [y] + bn, epsilon=1e-5)
    return b.op("Relu", [y]) if relu else y


def resnet(b, blocks, bottleneck):
    h = conv_bn(b, "x", 3, 64, 7, 2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin, expansion = 64, 4 if bottleneck else 1
    for stage, n in enumerate(blocks):
        width = 64 * 2 ** stage
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            cout = width * expansion
            if bottleneck:
                y = conv_bn(b, h, cin, width, 1, 1)
                y = conv_bn(b, y, width, width, 3, stride)
                y = conv_bn(b, y, width, cout, 1, 1, relu=False, gamma=0.2)
            else:
                y = conv_bn(b, h, cin, width, 3, stride)
                y = conv_bn(b, y, width, cout, 3, 1, relu=False, gamma=0.2)
            skip = conv_bn(b, h, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else h
            # Small last-BN scale in each branch keeps activations O(1) across the blocks.
            h = b.op("Relu", [b.op("Add", [y, skip])])
            cin = cout
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    w, _ = b.weight((1000, cin))
    bias, _ = b.weight((1000,), 0.02)
    b.output(b.op("Gemm", [h, w, bias], transB=1), "logits")
    io = ([("x", TensorProto.FLOAT, ["batch", 3, 224, 224])],
          [("logits", TensorProto.FLOAT, ["batch", 1000])])
    return io


def resnet18(b):
    return resnet(b, [2, 2, 2, 2], False), {"x": {"kind": "normal"}}, [1]


def resnet50(b):
    return resnet(b, [3, 4, 6, 3], True), {"x": {"kind": "normal"}}, [1, 32]


def linear(b, x, din, dout):
    w, _ = b.weight((din, dout), 0.02 * math.sqrt(768 / din))
    bias, _ = b.weight((dout,), 0.02)
    return b.op("Add", [b.op("MatMul", [x, w]), bias])


def layer_norm(b, x, hidden):
    g = b.const((1.0 + 0.05 * b.rng.standard_normal(hidden)).astype(np.float32))
    s = b.const((0.02 * b.rng.standard_normal(hidden)).astype(np.float32))
    return b.op("LayerNormalization", [x, g, s], axis=-1, epsilon=1e-5)


def scalar(b, v, dtype=np.float32):
    return b.const(np.array(v, dtype))


def erf_gelu(b, x):
    # x * 0.5 * (1 + erf(x / sqrt(2))), as torch.onnx exports nn.GELU() below opset 20.
    e = b.op("Erf", [b.op("Div", [x, scalar(b, math.sqrt(2.0))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, scalar(b, 1.0)])]), scalar(b, 0.5)])


def tanh_gelu(b, x):
    # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), GPT-2's gelu_new.
    cube = b.op("Pow", [x, scalar(b, 3.0)])
    inner = b.op("Add", [x, b.op("Mul", [cube, scalar(b, 0.044715)])])
    t = b.op("Tanh", [b.op("Mul", [inner, scalar(b, math.sqrt(2.0 / math.pi))])])
    return b.op("Mul", [b.op("Mul", [x, scalar(b, 0.5)]), b.op("Add", [t, scalar(b, 1.0)])])


def attention(b, q, k, v, heads, hidden, mask_add=None, causal=None):
    """q, k, v: [B, S, hidden] -> [B, S, hidden]; mask_add is added to the scores, causal
    (a bool [1, 1, S, S] initializer) selects scores or the most negative float."""
    dh = hidden // heads
    split = b.const(np.array([0, 0, heads, dh], np.int64))
    merge = b.const(np.array([0, 0, hidden], np.int64))
    q = b.op("Transpose", [b.op("Reshape", [q, split])], perm=[0, 2, 1, 3])
    kt = b.op("Transpose", [b.op("Reshape", [k, split])], perm=[0, 2, 3, 1])
    v = b.op("Transpose", [b.op("Reshape", [v, split])], perm=[0, 2, 1, 3])
    s = b.op("Div", [b.op("MatMul", [q, kt]), scalar(b, math.sqrt(dh))])
    if mask_add is not None:
        s = b.op("Add", [s, mask_add])
    if causal is not None:
        s = b.op("Where", [causal, s, scalar(b, np.finfo(np.float32).min)])
    a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
    return b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), merge])


def embeddings(b, ids, vocab, seq, hidden):
    wte, _ = b.weight((vocab, hidden), 0.02, hint="wte")
    wpe, _ = b.weight((seq, hidden), 0.01, hint="wpe")
    return b.op("Add", [b.op("Gather", [wte, ids], axis=0), wpe]), wte


def bert_base(b, layers=12, hidden=768, heads=12, ffn=3072, seq=128, vocab=30522):
    h, _ = embeddings(b, "input_ids", vocab, seq, hidden)
    h = layer_norm(b, h, hidden)
    # (1 - mask) * -10000 broadcast over heads and query positions, as HF BERT exports.
    m = b.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    m = b.op("Mul", [b.op("Sub", [scalar(b, 1.0), m]), scalar(b, -10000.0)])
    mask_add = b.op("Unsqueeze", [m, b.const(np.array([1, 2], np.int64))])
    for _ in range(layers):
        a = attention(b, linear(b, h, hidden, hidden), linear(b, h, hidden, hidden),
                      linear(b, h, hidden, hidden), heads, hidden, mask_add=mask_add)
        h = layer_norm(b, b.op("Add", [h, linear(b, a, hidden, hidden)]), hidden)
        f = linear(b, erf_gelu(b, linear(b, h, hidden, ffn)), ffn, hidden)
        h = layer_norm(b, b.op("Add", [h, f]), hidden)
    b.output(h, "last_hidden_state")
    io = ([("input_ids", TensorProto.INT64, ["batch", seq]),
           ("attention_mask", TensorProto.INT64, ["batch", seq])],
          [("last_hidden_state", TensorProto.FLOAT, ["batch", seq, hidden])])
    feeds = {"input_ids": {"kind": "ids", "high": vocab}, "attention_mask": {"kind": "ones"}}
    return io, feeds, [1]


def gpt2_small(b, layers=12, hidden=768, heads=12, seq=128, vocab=50257):
    h, wte = embeddings(b, "input_ids", vocab, seq, hidden)
    causal = b.const(np.tril(np.ones((seq, seq), bool)).reshape(1, 1, seq, seq), "causal")
    three = b.const(np.array([hidden] * 3, np.int64))
    for _ in range(layers):
        qkv = linear(b, layer_norm(b, h, hidden), hidden, 3 * hidden)
        q, k, v = b.op("Split", [qkv, three], n_out=3, axis=-1)
        a = attention(b, q, k, v, heads, hidden, causal=causal)
        h = b.op("Add", [h, linear(b, a, hidden, hidden)])
        f = linear(b, tanh_gelu(b, linear(b, layer_norm(b, h, hidden), hidden, 4 * hidden)),
                   4 * hidden, hidden)
        h = b.op("Add", [h, f])
    h = layer_norm(b, h, hidden)
    # Tied LM head: logits = h @ wte^T.
    b.output(b.op("MatMul", [h, b.op("Transpose", [wte], perm=[1, 0])]), "logits")
    io = ([("input_ids", TensorProto.INT64, ["batch", seq])],
          [("logits", TensorProto.FLOAT, ["batch", seq, vocab])])
    return io, {"input_ids": {"kind": "ids", "high": vocab}}, [1]


MODELS = {"mlp": mlp, "resnet18": resnet18, "resnet50": resnet50, "bert_base": bert_base,
          "gpt2_small": gpt2_small}


def up_to_date(dst, version):
    """True when `dst` holds a model whose meta.json stamp carries `version`."""
    stamp = os.path.join(dst, "meta.json")
    if not os.path.exists(stamp):
        return False
    with open(stamp) as f:
        return json.load(f).get("version") == version


def generate(out, name):
    """Builds `name` under `out` unless an up-to-date copy is there; True when built."""
    seed = 100 + list(MODELS).index(name)
    dst = os.path.join(out, name)
    stamp = os.path.join(dst, "meta.json")
    if up_to_date(dst, VERSION):
        return False
    t0 = time.time()
    b = Builder(np.random.default_rng(seed))
    (inputs, outputs), feeds, batches = MODELS[name](b)
    model = b.model(name, inputs, outputs, opset=OPSET, ir_version=8, full_check=False)
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    onnx.save(model, os.path.join(dst, "model.onnx"))
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    with open(stamp, "w") as f:
        json.dump({"version": VERSION, "feeds": feeds, "batches": batches,
                   "inputs": [i[0] for i in inputs], "params": params}, f, indent=1)
    print(f"  generated {name}: {len(model.graph.node)} nodes, {params / 1e6:.1f}M params "
          f"({time.time() - t0:.1f}s)", flush=True)
    return True


def cli(doc, models, generate_one):
    """The command line of a model generator: [--out DIR] [--only NAME ...]."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", nargs="*", choices=list(models), help="models to build")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.only or models:
        generate_one(args.out, name)
    return 0


def main():
    return cli(__doc__, MODELS, generate)


if __name__ == "__main__":
    sys.exit(main())
