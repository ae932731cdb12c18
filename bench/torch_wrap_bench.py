#!/usr/bin/env python3
"""Training step time of `onyx.torch.wrap(module)` next to eager PyTorch, on the training
benchmark's models (bench/gen_train_bench_models.py; the torch modules and weights of
bench/train_bench_torch.py), same threads, same optimizer (torch.optim.AdamW), same batch.

    PYTHONPATH=build/python torch_wrap_bench.py [--models mlp resnet18 bert] [--threads 2]
                                                [--warmup 3] [--iters 10] [--max-seconds 60]

Both sides run in this process, alternating one step each so machine noise hits both alike;
prints a markdown table of median step times, their ratio (onyx / torch: < 1 is faster),
the first step's loss of each (they train the same module on the same batch), the wrap()
time (export + graph building + compiling both modes) and the load average.
"""
import argparse
import copy
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench_torch import build_module, load_onnx_weights  # noqa: E402


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def bench_model(name, args, torch, onyx_torch):
    from onnx import load_tensor, numpy_helper
    folder = os.path.join(args.models_dir, name)
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    eager = build_module(name, torch)
    load_onnx_weights(eager, folder, meta, torch)
    eager.train()
    read = lambda n: torch.from_numpy(numpy_helper.to_array(  # noqa: E731
        load_tensor(os.path.join(folder, f"{n}.pb"))).copy())
    inputs, labels = [read(n) for n in meta["inputs"]], read(meta["labels"])

    module = copy.deepcopy(eager)
    t0 = time.perf_counter()
    wrapped = onyx_torch.wrap(module, tuple(inputs), threads=args.threads)
    wrap_s = time.perf_counter() - t0

    sides = {}
    for label, m in (("torch", eager), ("onyx", wrapped)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
        sides[label] = (m, opt, [], [])

    def step(label):
        m, opt, ms, losses = sides[label]
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(m(*inputs), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        return (time.perf_counter() - t) * 1e3

    for _ in range(args.warmup):
        for label in sides:
            step(label)
    start = time.perf_counter()
    while len(sides["torch"][2]) < max(args.iters, 3):
        for label in sides:
            sides[label][2].append(step(label))
        if len(sides["torch"][2]) >= 3 and time.perf_counter() - start > args.max_seconds:
            break
    t_ms, o_ms = median(sides["torch"][2]), median(sides["onyx"][2])
    return {"model": name, "torch_ms": t_ms, "onyx_ms": o_ms, "ratio": o_ms / t_ms,
            "runs": len(sides["torch"][2]), "wrap_s": wrap_s,
            "torch_loss0": sides["torch"][3][0], "onyx_loss0": sides["onyx"][3][0]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["mlp", "resnet18", "bert"])
    p.add_argument("--models-dir", default="bench/models/train")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=60)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import onyx.torch as onyx_torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    rows = [bench_model(m, args, torch, onyx_torch) for m in args.models]
    load = os.getloadavg()
    print(f"\nTraining step, onyx.torch.wrap vs eager PyTorch {torch.__version__} "
          f"(AdamW, {args.threads} threads, median of alternating steps; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})\n")
    print("| model | torch ms | onyx.torch.wrap ms | onyx / torch | steps | wrap() s | loss 0 torch | loss 0 onyx |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['torch_ms']:.1f} | {r['onyx_ms']:.1f} | {r['ratio']:.2f} | "
              f"{r['runs']} | {r['wrap_s']:.1f} | {r['torch_loss0']:.5f} | {r['onyx_loss0']:.5f} |")


if __name__ == "__main__":
    main()
