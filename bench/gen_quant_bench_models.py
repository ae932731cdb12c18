#!/usr/bin/env python3
"""Writes int8 versions of the torch.onnx benchmark models, as users make them for CPUs with
onnxruntime.quantization, into bench/models/<name>/:

    quant_mlp_dynamic    torch_mlp through quantize_dynamic (int8 weights; DynamicQuantizeLinear
                         + MatMulInteger per Linear), the recipe for transformers on CPUs
    quant_bert_dynamic   torch_bert_base the same way
    quant_resnet18_qdq   torch_resnet18 through quantize_static, QDQ format (QuantizeLinear /
                         DequantizeLinear around every Conv, per-tensor uint8 activations and
                         int8 weights), calibrated on 8 fixed-seed random images
    quant_resnet50_qdq   torch_resnet50 the same way

Each needs its float model from gen_torch_bench_models.py (built first when missing, which
needs torch). meta.json has the format of gen_bench_models.py; a model is rebuilt only when
its folder lacks a stamp matching VERSION.

Usage: gen_quant_bench_models.py [--out DIR] [--only NAME ...]   (needs torch, onnxruntime)
"""
import json
import os
import shutil
import sys
import time

import numpy as np

VERSION = "quant-1"
# name: (float model, method)
MODELS = {"quant_mlp_dynamic": ("torch_mlp", "dynamic"),
          "quant_bert_dynamic": ("torch_bert_base", "dynamic"),
          "quant_resnet18_qdq": ("torch_resnet18", "qdq"),
          "quant_resnet50_qdq": ("torch_resnet50", "qdq")}


def calibration_reader(model_path, meta, count=8):
    """count fixed-seed batches of random inputs in the float model's declared shapes."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader
    m = onnx.load(model_path, load_external_data=False)
    shapes = {i.name: [1 if d.dim_param else d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in m.graph.input}
    rng = np.random.default_rng(1234)
    batches = []
    for _ in range(count):
        feeds = {}
        for name in meta["inputs"]:
            if meta["feeds"][name]["kind"] != "normal":
                raise ValueError(f"calibration of {name}: only normal inputs are supported")
            feeds[name] = rng.standard_normal(shapes[name], dtype=np.float32)
        batches.append(feeds)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    return Reader()


def generate(out, name):
    """Quantizes `name` under `out` unless an up-to-date copy is there; True when built."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_bench_models
    import gen_torch_bench_models
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    dst = os.path.join(out, name)
    if gen_bench_models.up_to_date(dst, VERSION):
        return False
    src_name, method = MODELS[name]
    gen_torch_bench_models.generate(out, src_name)
    src = os.path.join(out, src_name, "model.onnx")
    with open(os.path.join(out, src_name, "meta.json")) as f:
        meta = json.load(f)
    t0 = time.time()
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    path = os.path.join(dst, "model.onnx")
    if method == "dynamic":
        quantize_dynamic(src, path, weight_type=QuantType.QInt8)
    else:
        quantize_static(src, path, calibration_reader(src, meta), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    meta = dict(meta, version=VERSION,
                exporter=f"{meta.get('exporter', '')}, onnxruntime.quantization {method}")
    with open(os.path.join(dst, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"  quantized {name} ({method}, {time.time() - t0:.1f}s)", flush=True)
    return True


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_bench_models
    return gen_bench_models.cli(__doc__, MODELS, generate)


if __name__ == "__main__":
    sys.exit(main())
