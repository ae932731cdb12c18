#!/usr/bin/env python3
"""Writes the small character-level language model that examples/train_char_lm.cpp trains.

A decoder-only transformer at opset 17, written the way PyTorch exports one:

    tokens int64 [batch, T]  (byte values, < vocab)
      -> Gather(token embedding) + learned positions
      -> n_layers x pre-LN block: LayerNormalization, causal self-attention (MatMul,
         Reshape/Transpose into heads, scale, + constant causal mask, Softmax), residual Add;
         LayerNormalization, MLP with erf GELU spelled out (Div, Erf, Add, Mul), residual Add
      -> LayerNormalization -> output projection -> logits transposed to [batch, vocab, T]
         (the class axis second, as softmax cross-entropy with labels [batch, T] wants).

Weights are random with a fixed seed (embeddings N(0, 0.02), linears N(0, 1/fan_in)).

Usage: gen_char_lm.py --out char_lm.onnx [--vocab 128] [--context 64] [--dim 64]
                      [--heads 4] [--layers 2] [--seed 0] [--check]
--check runs the model in onnxruntime (when installed) and compares it with a float64 numpy
forward pass written here.
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Graph:
    """Accumulates nodes and named initializers; intermediate names are generated."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.params, self.count = [], [], {}, 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def param(self, name, shape, std):
        a = (self.rng.standard_normal(shape) * std).astype(np.float32) if std else \
            np.zeros(shape, np.float32)
        self.params[name] = a
        return self.const(name, a)

    def ones(self, name, shape):
        self.params[name] = np.ones(shape, np.float32)
        return self.const(name, self.params[name])

    def op(self, op_type, inputs, out=None, **attrs):
        self.count += 1
        out = out or f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{op_type}_{self.count}",
                                           **attrs))
        return out


def build(vocab, context, dim, heads, layers, seed):
    g = Graph(seed)
    dh = dim // heads
    T = context
    split = g.const("split_heads_shape", np.array([-1, T, heads, dh], np.int64))
    merge = g.const("merge_heads_shape", np.array([-1, T, dim], np.int64))
    scale = g.const("attn_scale", np.array(1.0 / math.sqrt(dh), np.float32))
    # Additive causal mask: position t sees positions <= t.
    mask = np.triu(np.full((T, T), -1e9, np.float32), k=1)
    g.const("causal_mask", mask)
    sqrt2, one, half = (g.const(n, np.array(v, np.float32))
                        for n, v in (("sqrt2", math.sqrt(2.0)), ("one", 1.0), ("half", 0.5)))

    def linear(x, name, din, dout):
        w = g.param(f"{name}.weight", (din, dout), 1.0 / math.sqrt(din))
        b = g.param(f"{name}.bias", (dout,), 0.0)
        return g.op("Add", [g.op("MatMul", [x, w]), b])

    def layer_norm(x, name):
        return g.op("LayerNormalization", [x, g.ones(f"{name}.weight", (dim,)),
                                           g.param(f"{name}.bias", (dim,), 0.0)],
                    axis=-1, epsilon=1e-5)

    def gelu(x):  # 0.5 x (1 + erf(x / sqrt 2)), the erf form a PyTorch export writes
        e = g.op("Add", [g.op("Erf", [g.op("Div", [x, sqrt2])]), one])
        return g.op("Mul", [g.op("Mul", [x, e]), half])

    x = g.op("Gather", [g.param("tok_emb", (vocab, dim), 0.02), "tokens"])
    x = g.op("Add", [x, g.param("pos_emb", (T, dim), 0.02)])
    for l in range(layers):
        p = f"block{l}"
        h = layer_norm(x, f"{p}.ln1")
        heads_of = lambda t, perm: g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)
        q = heads_of(linear(h, f"{p}.q", dim, dim), [0, 2, 1, 3])   # [B, H, T, dh]
        kt = heads_of(linear(h, f"{p}.k", dim, dim), [0, 2, 3, 1])  # [B, H, dh, T]
        v = heads_of(linear(h, f"{p}.v", dim, dim), [0, 2, 1, 3])
        s = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, kt]), scale]), "causal_mask"])
        a = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
        a = g.op("Reshape", [g.op("Transpose", [a], perm=[0, 2, 1, 3]), merge])
        x = g.op("Add", [x, linear(a, f"{p}.proj", dim, dim)])
        h = layer_norm(x, f"{p}.ln2")
        x = g.op("Add", [x, linear(gelu(linear(h, f"{p}.fc1", dim, 4 * dim)), f"{p}.fc2",
                                   4 * dim, dim)])
    logits = linear(layer_norm(x, "ln_f"), "head", dim, vocab)
    g.op("Transpose", [logits], out="logits", perm=[0, 2, 1])

    graph = helper.make_graph(
        g.nodes, "char_lm",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", vocab, T])],
        g.inits)
    model = helper.make_model(graph, producer_name="onyx-gen_char_lm",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model, g.params


def reference(params, tokens, heads, layers):
    """float64 numpy forward pass of the same model: logits [B, V, T]."""
    P = {k: v.astype(np.float64) for k, v in params.items()}
    B, T = tokens.shape
    dim = P["pos_emb"].shape[1]
    dh = dim // heads

    def ln(x, n):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * P[f"{n}.weight"] + P[f"{n}.bias"]

    lin = lambda x, n: x @ P[f"{n}.weight"] + P[f"{n}.bias"]
    erf = np.vectorize(math.erf)
    x = P["tok_emb"][tokens] + P["pos_emb"]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(layers):
        p = f"block{l}"
        h = ln(x, f"{p}.ln1")
        sh = lambda t: t.reshape(B, T, heads, dh).transpose(0, 2, 1, 3)
        q, k, v = sh(lin(h, f"{p}.q")), sh(lin(h, f"{p}.k")), sh(lin(h, f"{p}.v"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        x = x + lin(a.transpose(0, 2, 1, 3).reshape(B, T, dim), f"{p}.proj")
        f = lin(ln(x, f"{p}.ln2"), f"{p}.fc1")
        x = x + lin(0.5 * f * (1 + erf(f / math.sqrt(2))), f"{p}.fc2")
    return lin(ln(x, "ln_f"), "head").transpose(0, 2, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, help="path of the .onnx file to write")
    ap.add_argument("--vocab", type=int, default=128, help="token ids are bytes below this")
    ap.add_argument("--context", type=int, default=64, help="sequence length T")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true", help="compare onnxruntime with numpy")
    a = ap.parse_args()
    if a.dim % a.heads:
        sys.exit(f"gen_char_lm: --dim {a.dim} is not a multiple of --heads {a.heads}")
    model, params = build(a.vocab, a.context, a.dim, a.heads, a.layers, a.seed)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, a.out)  # atomic: a concurrent reader never sees half a file
    n = sum(v.size for v in params.values())
    print(f"wrote {a.out}: {a.layers} blocks, dim {a.dim}, {a.heads} heads, context "
          f"{a.context}, vocab {a.vocab}, {n} parameters")
    if a.check:
        import onnxruntime as ort
        tokens = np.random.default_rng(1).integers(0, a.vocab, (3, a.context), dtype=np.int64)
        got = ort.InferenceSession(a.out, providers=["CPUExecutionProvider"]).run(
            None, {"tokens": tokens})[0]
        ref = reference(params, tokens, a.heads, a.layers)
        print(f"onnxruntime vs numpy float64: max abs diff {np.abs(got - ref).max():.2e}")


if __name__ == "__main__":
    main()
