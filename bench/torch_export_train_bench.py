#!/usr/bin/env python3
"""Training what torch.onnx.export writes: onyx next to PyTorch on the same module.

The training bench (train_bench_torch.py) trains graphs written by hand the way the exporter
spells them; this one trains the exporter's own output. Each model is built in PyTorch with a
fixed seed, exported in training mode (TrainingMode.TRAINING, no constant folding, so the
parameters keep their state_dict names and BatchNormalization its training outputs), and its
state_dict saved next to the ONNX file, so the PyTorch side trains the very same weights without
any name mapping. Both sides take one fixed batch, softmax cross-entropy (mean) and AdamW, in a
fresh process each, and report the median step time, peak RSS and the first losses.

  bench/torch_export_train_bench.py [--models resnet18 gpt2] [--threads 2] [--iters 5]
                                    [--torch-flush-denormal]  (PyTorch flushes denormals too)
                                    [--precision bf16]  (onyx TrainingConfig::precision next to
                                                         torch.autocast over forward and loss)

Models (bench/models/train_torch/<name>/, made on first use):
  resnet18  torchvision-shaped ResNet-18 (BasicBlocks, BatchNorm in training mode), 64x64 input,
            1000 classes, batch 16 (11.7 M parameters)
  gpt2      GPT-2-style decoder from nn.TransformerEncoderLayer (pre-LN, causal mask, GELU), tied
            LM head, 4 layers, hidden 512, 8 heads, vocab 16384, sequence 128, batch 4; the loss
            reads the logits [N, S, V] with classes last (onyx --class-axis -1)
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_bench_torch import status_mb  # noqa: E402  (VmRSS / VmHWM, as the training bench)
OUT = os.path.join(HERE, "models", "train_torch")
VERSION = "1"


def build(name, torch):
    import gen_torch_bench_models as models
    if name == "resnet18":
        model, _, _, _ = models.resnet18()
        x = torch.randn(16, 3, 64, 64)
        labels = torch.randint(0, 1000, (16,))
        return model, {"x": x}, labels, 1

    vocab, hidden, heads, layers, seq, batch = 16384, 512, 8, 4, 128, 4
    model = models.gpt2_module(vocab, hidden, heads, 4 * hidden, layers)
    models.distinct_layers(model)  # each layer its own weights
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    return model, {"input_ids": ids}, labels, -1


def save_pb(t, path, name, numpy_helper):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(t.numpy(), name).SerializeToString())


def generate(name):
    """Exports `name` unless an up-to-date copy is there."""
    dst = os.path.join(OUT, name)
    meta_path = os.path.join(dst, "meta.json")
    if os.path.exists(meta_path) and json.load(open(meta_path)).get("version") == VERSION:
        return
    import torch
    from onnx import numpy_helper
    torch.manual_seed(400 + ["resnet18", "gpt2"].index(name))
    model, inputs, labels, class_axis = build(name, torch)
    model.train()
    os.makedirs(dst, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(dst, "state_dict.pt"))
    t0 = time.time()
    torch.onnx.export(model, tuple(inputs.values()), os.path.join(dst, "model.onnx"),
                      input_names=list(inputs), output_names=["logits"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      dynamo=False)
    for n, t in inputs.items():
        save_pb(t, os.path.join(dst, f"{n}.pb"), n, numpy_helper)
    save_pb(labels, os.path.join(dst, "labels.pb"), "labels", numpy_helper)
    params = sum(p.numel() for p in model.parameters())
    with open(meta_path, "w") as f:
        json.dump({"version": VERSION, "inputs": list(inputs), "class_axis": class_axis,
                   "params": params, "torch": torch.__version__}, f, indent=1)
    print(f"  exported {name}: {params / 1e6:.1f} M parameters ({time.time() - t0:.1f} s)",
          flush=True)


def run_torch(args):
    """One model in this process: the module from its saved state_dict, timed steps, JSON."""
    import torch
    from onnx import load_tensor, numpy_helper
    base_mb = status_mb("VmRSS")
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    if args.torch_flush_denormal:
        torch.set_flush_denormal(True)
    folder = os.path.join(OUT, args.model)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    model, _, _, class_axis = build(args.model, torch)
    model.load_state_dict(torch.load(os.path.join(folder, "state_dict.pt")))
    model.train()
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                fused=True)
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    read = lambda n: torch.from_numpy(numpy_helper.to_array(
        load_tensor(os.path.join(folder, f"{n}.pb"))).copy())
    inputs, labels = [read(n) for n in meta["inputs"]], read("labels")

    import contextlib
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.precision == "bf16" \
        else contextlib.nullcontext

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(*inputs)
            if class_axis == -1:
                out, target = out.reshape(-1, out.shape[-1]), labels.reshape(-1)
            else:
                target = labels
            loss = torch.nn.functional.cross_entropy(out, target)
        loss.backward()
        opt.step()
        return loss.item()

    losses, ms = [step() for _ in range(args.warmup)], []
    while len(ms) < max(args.iters, 3):
        t0 = time.perf_counter()
        losses.append(step())
        ms.append((time.perf_counter() - t0) * 1e3)
    s = sorted(ms)
    n = len(s)
    print(json.dumps({"median_ms": s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2,
                      "losses": losses, "base_rss_mb": round(base_mb, 1),
                      "peak_rss_mb": round(status_mb("VmHWM"), 1)}))


def last_json(cmd, env, what):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        sys.exit(f"torch_export_train_bench: {what} failed ({r.returncode}):\n"
                 f"{r.stderr[-3000:]}{r.stdout[-1000:]}")
    return json.loads(lines[-1])


def table(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    load_before = os.getloadavg()[0]
    rows = []
    for name in args.models:
        generate(name)
        folder = os.path.join(OUT, name)
        meta = json.load(open(os.path.join(folder, "meta.json")))
        onyx = last_json([args.onyx_bench, "--model", os.path.join(folder, "model.onnx"),
                          "--data", folder, "--threads", str(args.threads),
                          "--warmup", str(args.warmup), "--iters", str(args.iters),
                          "--lr", str(args.lr), "--weight-decay", str(args.weight_decay),
                          "--class-axis", str(meta["class_axis"]), "--precision", args.precision],
                         env, f"onyx on {name}")
        torch_ = last_json([sys.executable, __file__, "run-torch", "--model", name,
                            "--threads", str(args.threads), "--warmup", str(args.warmup),
                            "--iters", str(args.iters), "--lr", str(args.lr),
                            "--weight-decay", str(args.weight_decay), "--precision", args.precision]
                           + (["--torch-flush-denormal"] if args.torch_flush_denormal else []),
                           env, f"PyTorch on {name}")
        rows.append((name, meta, onyx, torch_))
    print("| model | threads | onyx ms/step | PyTorch ms/step | onyx / PyTorch | "
          "onyx peak MB | PyTorch peak MB | first two losses onyx / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, meta, o, t in rows:
        print(f"| {name} ({meta['params'] / 1e6:.1f} M) | {args.threads} | {o['median_ms']:.1f} | "
              f"{t['median_ms']:.1f} | {o['median_ms'] / t['median_ms']:.2f} | "
              f"{o['peak_rss_mb']:.0f} | {t['peak_rss_mb']:.0f} | "
              f"{o['losses'][0]:.5f}, {o['losses'][1]:.5f} / "
              f"{t['losses'][0]:.5f}, {t['losses'][1]:.5f} |")
    print(f"load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs; precision {args.precision} (PyTorch: "
          f"{'torch.autocast bf16 over forward and loss' if args.precision == 'bf16' else 'float32'}); "
          f"AdamW lr {args.lr}, weight decay {args.weight_decay}; "
          f"denormals: onyx flushes them (its training default), PyTorch "
          f"{'flushes them (--torch-flush-denormal)' if args.torch_flush_denormal else 'keeps them (its default)'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="table", choices=["table", "run-torch"])
    ap.add_argument("--models", nargs="+", default=["resnet18", "gpt2"],
                    choices=["resnet18", "gpt2"])
    ap.add_argument("--model", help="run-torch: the one model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="onyx TrainingConfig::precision; PyTorch under torch.autocast(bf16)")
    ap.add_argument("--torch-flush-denormal", action="store_true",
                    help="PyTorch with torch.set_flush_denormal(True), as onyx trains by default")
    ap.add_argument("--onyx-bench", default=os.path.join(HERE, "..", "build", "bench",
                                                         "onyx_train_bench"))
    args = ap.parse_args()
    if args.mode == "run-torch":
        run_torch(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
