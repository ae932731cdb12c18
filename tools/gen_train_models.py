#!/usr/bin/env python3
"""Builds the untrained digits classifiers that `onyx train` and examples/ train.

Both models take float32 pixels in [0, 1] and return float32 logits [N, 10] named "logits";
N is symbolic. Weights are initialised as PyTorch initialises nn.Linear and nn.Conv2d
(kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
biases) from a fixed seed, so every run writes the same files. ONNX opset 17.

    digits_mlp.onnx   x [N, 64] -> Gemm 128 -> Relu -> Dropout 0.1 -> Gemm 10
    digits_cnn.onnx   x [N, 1, 8, 8] -> Conv 16 3x3 pad 1 -> Relu -> MaxPool 2
                      -> Conv 32 3x3 pad 1 -> Relu -> MaxPool 2 -> Flatten -> Gemm 10

Usage: gen_train_models.py [--out DIR] [--seed S]
"""
import argparse
import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def uniform(rng, shape, fan_in):
    """PyTorch's default for Linear/Conv weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def linear(rng, name, n_in, n_out):
    return [numpy_helper.from_array(uniform(rng, (n_out, n_in), n_in), name + ".weight"),
            numpy_helper.from_array(uniform(rng, (n_out,), n_in), name + ".bias")]


def conv(rng, name, c_in, c_out, k):
    fan_in = c_in * k * k
    return [numpy_helper.from_array(uniform(rng, (c_out, c_in, k, k), fan_in), name + ".weight"),
            numpy_helper.from_array(uniform(rng, (c_out,), fan_in), name + ".bias")]


def save(graph, path):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="onyx tools/gen_train_models.py")
    model.ir_version = 8  # the IR version of opset 17; newer onnx packages write newer ones
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    print(f"gen_train_models: wrote {path}")


def mlp(rng):
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Dropout", ["a", "dropout.ratio"], ["d"]),
        helper.make_node("Gemm", ["d", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
    ]
    inits = linear(rng, "fc1", 64, 128) + linear(rng, "fc2", 128, 10)
    inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "dropout.ratio"))
    return helper.make_graph(
        nodes, "digits_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)


def cnn(rng):
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], **pool),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], **pool),
        helper.make_node("Flatten", ["p2"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    inits = conv(rng, "conv1", 1, 16, 3) + conv(rng, "conv2", 16, 32, 3) + linear(rng, "fc", 128, 10)
    return helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/digits", help="folder for the .onnx files")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    save(mlp(np.random.default_rng(args.seed)), os.path.join(args.out, "digits_mlp.onnx"))
    save(cnn(np.random.default_rng(args.seed + 1)), os.path.join(args.out, "digits_cnn.onnx"))


if __name__ == "__main__":
    main()
