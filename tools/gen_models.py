#!/usr/bin/env python3
"""Builds the small real models the C++ tests run (tests/unit/test_real_models.cpp).

Each model is built with onnx.helper from fixed-seed random weights, and each has a
float64 numpy implementation written here, independent of any ONNX runtime, that computes
the reference outputs. Layout per model (the ONNX backend-test layout):

    <out>/<name>/model.onnx
    <out>/<name>/test_data_set_<k>/input_<i>.pb    (TensorProto, graph input order)
    <out>/<name>/test_data_set_<k>/output_<i>.pb   (float64 reference, stored as float32)

Usage: gen_models.py [--out DIR] [--check-ort]
--check-ort also runs onnxruntime (when installed) on every data set and reports its
largest deviation from the numpy reference; it is a check of this script, not an input to
the tests.
"""
import argparse
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models",
                           "generated")
# Bump when the models change; the C++ test checks the stamp to catch stale folders.
VERSION = "1"


class Builder:
    """Accumulates nodes and initializers; names are generated and unique."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint="c"):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def weight(self, shape, scale=None, hint="w"):
        """Random float32 weight (He-like scale by default); returns (name, array)."""
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        scale = scale if scale is not None else 1.0 / math.sqrt(fan_in)
        a = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
        return self.const(a, hint), a

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.name(op_type),
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs, opset, ir_version=9, full_check=True):
        """inputs/outputs: [(value name, elem type, shape with str dims for symbolic)]."""
        vi = lambda spec: helper.make_tensor_value_info(*spec)
        graph = helper.make_graph(self.nodes, name, [vi(s) for s in inputs],
                                  [vi(s) for s in outputs], self.inits)
        m = helper.make_model(graph, producer_name="onyx-gen_models",
                              opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = ir_version
        onnx.checker.check_model(m, full_check=full_check)
        return m

    def output(self, value, out_name):
        """Renames the producer of `value` so the graph output is called `out_name`."""
        for n in self.nodes:
            for i, o in enumerate(n.output):
                if o == value:
                    n.output[i] = out_name
        return out_name


# ---- float64 numpy reference ops (ONNX semantics) -------------------------------------------

def f64(a):
    return np.asarray(a, dtype=np.float64)


def relu(x):
    return np.maximum(x, 0.0)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x, scale, bias, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * f64(scale) + f64(bias)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def batch_norm(x, scale, bias, mean, var, eps):
    sh = (1, -1, 1, 1)
    return ((x - f64(mean).reshape(sh)) / np.sqrt(f64(var).reshape(sh) + eps) *
            f64(scale).reshape(sh) + f64(bias).reshape(sh))


def conv2d(x, w, b, stride=1, pad=0, group=1):
    """NCHW conv, symmetric padding, by accumulating one kernel tap at a time."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho, wo = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    y = np.zeros((n, m, ho, wo))
    mg = m // group
    for g in range(group):
        xs, ws = xp[:, g * cg:(g + 1) * cg], f64(w[g * mg:(g + 1) * mg])
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    return y + f64(b).reshape(1, -1, 1, 1)


def max_pool(x, k, stride, pad):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    y = np.full((n, c, ho, wo), -np.inf)
    for i in range(k):
        for j in range(k):
            y = np.maximum(y, xp[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride])
    return y


def avg_pool_nopad(x, k):
    n, c, h, w = x.shape
    return x[:, :, :h // k * k, :w // k * k].reshape(n, c, h // k, k, w // k, k).mean(axis=(3, 5))


# ---- models ---------------------------------------------------------------------------------

def make_mlp(rng):
    """784-256-128-10 MLP: Gemm, MatMul+Add, Relu, Softmax; symbolic batch."""
    b = Builder(rng)
    w1n, w1 = b.weight((256, 784))  # Gemm transB=1 layout
    b1n, b1 = b.weight((256,), 0.1)
    w2n, w2 = b.weight((256, 128))
    b2n, b2 = b.weight((128,), 0.1)
    w3n, w3 = b.weight((128, 10))
    b3n, b3 = b.weight((10,), 0.1)
    h = b.op("Relu", [b.op("Gemm", ["x", w1n, b1n], transB=1)])
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", [h, w2n]), b2n])])
    h = b.op("Gemm", [h, w3n, b3n], alpha=1.0, beta=1.0)
    b.output(b.op("Softmax", [h], axis=-1), "probs")
    model = b.model("mlp", [("x", TensorProto.FLOAT, ["batch", 784])],
                    [("probs", TensorProto.FLOAT, ["batch", 10])], opset=13, ir_version=8)

    def ref(x):
        h = relu(f64(x) @ f64(w1).T + f64(b1))
        h = relu(h @ f64(w2) + f64(b2))
        return [softmax(h @ f64(w3) + f64(b3), -1)]

    feeds = [[rng.standard_normal((n, 784)).astype(np.float32)] for n in (1, 5)]
    return model, ref, feeds


def make_cnn(rng):
    """Small CNN on 3x32x32: Conv(+group), BatchNormalization, Relu, MaxPool, AveragePool,
    GlobalAveragePool, Flatten, Gemm; symbolic batch."""
    b = Builder(rng)
    layers = []  # (conv w, conv b, stride, pad, group, bn params or None)

    def conv_block(x, cin, cout, k, stride, pad, group=1, bn=True):
        wn, w = b.weight((cout, cin // group, k, k))
        bn_, bias = b.weight((cout,), 0.1)
        y = b.op("Conv", [x, wn, bn_], kernel_shape=[k, k], strides=[stride, stride],
                 pads=[pad] * 4, group=group)
        bnp = None
        if bn:
            scale = (1.0 + 0.2 * rng.standard_normal(cout)).astype(np.float32)
            shift = (0.1 * rng.standard_normal(cout)).astype(np.float32)
            mean = (0.1 * rng.standard_normal(cout)).astype(np.float32)
            var = (0.5 + rng.random(cout)).astype(np.float32)
            y = b.op("BatchNormalization", [y, b.const(scale), b.const(shift), b.const(mean),
                                            b.const(var)], epsilon=1e-5)
            bnp = (scale, shift, mean, var)
        layers.append((w, bias, stride, pad, group, bnp))
        return b.op("Relu", [y])

    h = conv_block("x", 3, 16, 3, 1, 1)                         # 16x32x32
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)  # 16x16x16
    h = conv_block(h, 16, 32, 3, 1, 1, group=2)                 # 32x16x16
    h = b.op("AveragePool", [h], kernel_shape=[2, 2], strides=[2, 2])  # 32x8x8
    h = conv_block(h, 32, 64, 3, 2, 1, bn=False)                # 64x4x4
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    wfn, wf = b.weight((64, 10))
    bfn, bf = b.weight((10,), 0.1)
    b.output(b.op("Gemm", [h, wfn, bfn]), "logits")
    model = b.model("cnn", [("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                    [("logits", TensorProto.FLOAT, ["batch", 10])], opset=17)

    def ref(x):
        h = f64(x)
        for i, (w, bias, stride, pad, group, bnp) in enumerate(layers):
            h = conv2d(h, w, bias, stride, pad, group)
            if bnp is not None:
                h = batch_norm(h, *bnp, 1e-5)
            h = relu(h)
            if i == 0:
                h = max_pool(h, 3, 2, 1)
            elif i == 1:
                h = avg_pool_nopad(h, 2)
        h = h.mean(axis=(2, 3))
        return [h @ f64(wf) + f64(bf)]

    feeds = [[rng.standard_normal((n, 3, 32, 32)).astype(np.float32)] for n in (1, 3)]
    return model, ref, feeds


def make_transformer(rng, hidden=64, heads=4, ffn=256, n_layers=2):
    """Two post-LN encoder layers: MatMul, Reshape, Transpose, Div/Mul scale, Softmax,
    LayerNormalization, Gelu, residual Adds; symbolic batch and sequence."""
    b = Builder(rng)
    dh = hidden // heads
    split_shape = b.const(np.array([0, 0, heads, dh], np.int64), "split_heads")
    merge_shape = b.const(np.array([0, 0, hidden], np.int64), "merge_heads")
    params = []

    def linear(x, din, dout):
        wn, w = b.weight((din, dout))
        bn_, bias = b.weight((dout,), 0.02)
        return b.op("Add", [b.op("MatMul", [x, wn]), bn_]), (w, bias)

    def ln(x):
        g = (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
        s = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
        return b.op("LayerNormalization", [x, b.const(g), b.const(s)], axis=-1,
                    epsilon=1e-5), (g, s)

    x = "x"
    for layer in range(n_layers):
        q, pq = linear(x, hidden, hidden)
        k, pk = linear(x, hidden, hidden)
        v, pv = linear(x, hidden, hidden)
        q = b.op("Transpose", [b.op("Reshape", [q, split_shape])], perm=[0, 2, 1, 3])
        kt = b.op("Transpose", [b.op("Reshape", [k, split_shape])], perm=[0, 2, 3, 1])
        v = b.op("Transpose", [b.op("Reshape", [v, split_shape])], perm=[0, 2, 1, 3])
        s = b.op("MatMul", [q, kt])
        # Layer 0 divides by sqrt(dh), layer 1 multiplies by 1/sqrt(dh): both export forms.
        if layer % 2 == 0:
            s = b.op("Div", [s, b.const(np.array(math.sqrt(dh), np.float32))])
        else:
            s = b.op("Mul", [s, b.const(np.array(1.0 / math.sqrt(dh), np.float32))])
        a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), v])
        a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), merge_shape])
        o, po = linear(a, hidden, hidden)
        h, pln1 = ln(b.op("Add", [x, o]))
        f, pf1 = linear(h, hidden, ffn)
        f, pf2 = linear(b.op("Gelu", [f]), ffn, hidden)
        x, pln2 = ln(b.op("Add", [h, f]))
        params.append((pq, pk, pv, po, pln1, pf1, pf2, pln2))
    b.output(x, "y")
    model = b.model("transformer", [("x", TensorProto.FLOAT, ["batch", "seq", hidden])],
                    [("y", TensorProto.FLOAT, ["batch", "seq", hidden])], opset=20)

    def ref(x):
        x = f64(x)
        lin = lambda t, p: t @ f64(p[0]) + f64(p[1])
        for pq, pk, pv, po, pln1, pf1, pf2, pln2 in params:
            n, sq, _ = x.shape
            heads_of = lambda t: t.reshape(n, sq, heads, dh).transpose(0, 2, 1, 3)
            q, k, v = heads_of(lin(x, pq)), heads_of(lin(x, pk)), heads_of(lin(x, pv))
            p = softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh), -1)
            a = (p @ v).transpose(0, 2, 1, 3).reshape(n, sq, hidden)
            h = layer_norm(x + lin(a, po), *pln1)
            x = layer_norm(h + lin(gelu(lin(h, pf1)), pf2), *pln2)
        return [x]

    feeds = [[rng.standard_normal((n, s, hidden)).astype(np.float32)]
             for n, s in ((1, 16), (3, 16), (2, 9))]
    return model, ref, feeds


MODELS = {"mlp": make_mlp, "cnn": make_cnn, "transformer": make_transformer}


def write_model(out_dir, name, make, seed, check_ort):
    rng = np.random.default_rng(seed)
    model, ref, feeds = make(rng)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir)
    onnx.save(model, os.path.join(tmp, "model.onnx"))
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    worst = 0.0
    for k, inputs in enumerate(feeds):
        d = os.path.join(tmp, f"test_data_set_{k}")
        os.makedirs(d)
        outputs = ref(*inputs)
        for i, (n, a) in enumerate(zip(in_names, inputs)):
            onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(d, f"input_{i}.pb"))
        for i, (n, a) in enumerate(zip(out_names, outputs)):
            onnx.save_tensor(numpy_helper.from_array(a.astype(np.float32), n),
                             os.path.join(d, f"output_{i}.pb"))
        if check_ort:
            worst = max(worst, ort_deviation(model, in_names, inputs, outputs))
    dst = os.path.join(out_dir, name)
    # Replace atomically enough that a concurrent reader sees the old or the new folder.
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.rename(tmp, dst)
    shapes = ", ".join("x".join(map(str, f[0].shape)) for f in feeds)
    extra = f"; onnxruntime max rel deviation {worst:.2e}" if check_ort else ""
    print(f"{name}: {len(model.graph.node)} nodes, inputs {shapes}{extra}")


def ort_deviation(model, in_names, inputs, ref_outputs):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip(in_names, inputs)))
    return max(float(np.max(np.abs(g - r) / np.maximum(1.0, np.abs(r))))
               for g, r in zip(got, ref_outputs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s)")
    ap.add_argument("--check-ort", action="store_true",
                    help="also compare onnxruntime against the numpy references")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for seed, (name, make) in enumerate(MODELS.items()):
        write_model(out, name, make, 1234 + seed, args.check_ort)
    with open(os.path.join(out, "VERSION"), "w") as f:
        f.write(VERSION + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
