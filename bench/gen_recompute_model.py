#!/usr/bin/env python3
"""Exports the GPT-2-style decoder of tools/gen_torch_models.py at benchmark size for
bench/run_recompute.sh: 6 blocks, hidden 256, 4 heads, context 128, vocab 1000 (opset 17,
torch.onnx TorchScript exporter, dynamic batch and sequence). Needs PyTorch.

Usage: gen_recompute_model.py OUT.onnx
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import gen_torch_models  # noqa: E402


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = gen_torch_models.Gpt2(vocab=1000, dim=256, heads=4, layers=6, context=128).eval()
    # Distinct values in every parameter, so the exporter cannot merge equal ones.
    gen_torch_models.perturb_(model, torch.Generator().manual_seed(1))
    tokens = torch.randint(0, 1000, (2, 128))
    gen_torch_models.export(model, (tokens,), ["tokens"], {"tokens": {0: "batch", 1: "seq"}}, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
