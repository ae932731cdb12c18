#!/usr/bin/env python3
"""Records what PyTorch's torch.amp.GradScaler decides over scripted training steps, for
tests/training/test_mixed_precision.cpp to replay against onyx's LossScaler.

Each case is a GradScaler configuration and a step pattern: 'c' a clean step, 'i' a step whose
gradient holds an inf, 'n' one with a NaN. The loss is sum(p * c) with c = [1, 2, 3, 4] (one
entry inf or NaN), so p's gradient is c * scale in float32 (which also overflows when the
scale is near float32's maximum). Per step the file records [kind, the scale the step ran
with, 1 if the optimizer step was skipped, the scale afterwards, the growth tracker
afterwards].

Usage: gen_grad_scaler_sequence.py --out tests/data/grad_scaler/sequences.json
"""
import argparse
import json

import torch

CASES = [
    # torch's defaults: 2^16, x2 after 2000 clean steps, x0.5 on overflow.
    {"name": "defaults", "config": {},
     "pattern": "i" * 3 + "c" * 2000 + "n" + "c" * 1999 + "c" + "i" + "c" * 10},
    {"name": "small_interval",
     "config": {"init_scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 3},
     "pattern": "ccc" "cc" "i" "ccc" "n" "c" "i" "cccccccccccc" "iiiii" "cccc"},
    # Growth stops where the scale would overflow float32 (3.4e38): the scale stays put.
    {"name": "growth_to_float32_max",
     "config": {"init_scale": 2.0 ** 120, "growth_factor": 2.0 ** 4, "growth_interval": 1},
     "pattern": "c" * 6 + "i" + "c" * 3},
    # Backoff towards zero.
    {"name": "backoff_run", "config": {"init_scale": 8.0, "backoff_factor": 0.5, "growth_interval": 2},
     "pattern": "i" * 12 + "cc" + "i"},
]


def run_case(case):
    p = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", **case["config"])
    steps = []
    for kind in case["pattern"]:
        opt.zero_grad()
        c = torch.tensor([1.0, 2.0, 3.0, 4.0])
        if kind == "i":
            c[1] = float("inf")
        elif kind == "n":
            c[2] = float("nan")
        loss = (p * c).sum()
        ran_with = scaler.get_scale()
        scaler.scale(loss).backward()
        before = p.detach().clone()
        scaler.step(opt)
        scaler.update()
        skipped = bool(torch.equal(before, p.detach()))
        steps.append([kind, ran_with, int(skipped), scaler.get_scale(),
                      int(scaler._growth_tracker.item())])
    return {"name": case["name"], "config": case["config"], "steps": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = {"torch": torch.__version__, "cases": [run_case(c) for c in CASES]}
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}: {sum(len(c['steps']) for c in out['cases'])} steps, torch {torch.__version__}")


if __name__ == "__main__":
    main()
