#!/usr/bin/env python3
"""The training benchmark's PyTorch side and its driver (bench/run_train.sh calls it).

    train_bench_torch.py table --onyx-bench PATH [--models mlp resnet18 bert] [--threads 2]
                               [--warmup 3] [--iters 10] [--max-seconds 60] [--json FILE]
                               [--precision bf16|fp16]
    train_bench_torch.py run --dir bench/models/train/mlp [--threads 2] [--precision bf16] ...

`run` times PyTorch training steps on one model folder written by gen_train_bench_models.py
and prints one JSON line, the same fields as bench/onyx_train_bench: the module is the
PyTorch equivalent of model.onnx (below), loaded with the ONNX file's initializers by name, and
trained with torch.optim.AdamW (fused when this torch has it) on the folder's fixed batch.

`table` runs, for each model, onyx_train_bench and `run` in fresh processes (so each peak RSS
is one model's), with the same thread count (also OMP_NUM_THREADS / MKL_NUM_THREADS), the same
optimizer settings, warm-up and step counts, and prints a markdown table of median step times,
their ratio and peak RSS, then the first two steps' losses of both as a check that both train
the same model on the same batch.

With `table --precision bf16` (or fp16) every model runs four ways: onyx in float32 and in
mixed precision (`onyx_train_bench --precision`), PyTorch in float32 and under CPU autocast
(`torch.autocast("cpu", dtype=torch.bfloat16)` around forward and loss, as PyTorch's AMP recipe
has it; fp16 adds torch.amp.GradScaler), and the table adds the speed-ups.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# ---- the PyTorch modules (state_dict names = the ONNX initializer names) -------------------

def build_module(name, torch):
    nn, F = torch.nn, torch.nn.functional

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(784, 512), nn.Linear(512, 512)
            self.fc3 = nn.Linear(512, 10)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            return F.relu(y + (self.downsample(x) if self.downsample is not None else x))

    class ResNet18(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            cin = 64
            for stage in range(4):
                cout = 64 * 2 ** stage
                blocks = [BasicBlock(cin, cout, 2 if stage > 0 else 1), BasicBlock(cout, cout, 1)]
                setattr(self, f"layer{stage + 1}", nn.Sequential(*blocks))
                cin = cout
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class EncoderLayer(nn.Module):
        def __init__(self, hidden, heads, ffn):
            super().__init__()
            self.heads = heads
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.norm1 = nn.LayerNorm(hidden, eps=1e-12)
            self.ffn1, self.ffn2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.norm2 = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x):
            B, S, H = x.shape
            heads = lambda t: t.view(B, S, self.heads, H // self.heads).transpose(1, 2)
            a = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)))
            x = self.norm1(x + self.out(a.transpose(1, 2).reshape(B, S, H)))
            return self.norm2(x + self.ffn2(F.gelu(self.ffn1(x))))

    class Embeddings(nn.Module):
        def __init__(self, vocab, seq, hidden):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Parameter(torch.zeros(seq, hidden))
            self.norm = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, ids):
            return self.norm(self.word(ids) + self.position)

    class Bert(nn.Module):
        def __init__(self, vocab=30522, seq=128, hidden=512, layers=4, heads=8, ffn=2048):
            super().__init__()
            self.embeddings = Embeddings(vocab, seq, hidden)
            self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))
            self.pooler, self.classifier = nn.Linear(hidden, hidden), nn.Linear(hidden, 2)

        def forward(self, ids):
            x = self.embeddings(ids)
            for layer in self.layers:
                x = layer(x)
            return self.classifier(torch.tanh(self.pooler(x[:, 0])))

    return {"mlp": Mlp, "resnet18": ResNet18, "bert": Bert}[name]()


def load_onnx_weights(module, folder, meta, torch):
    """Copies model.onnx's initializers into the module's state_dict entries of the same name."""
    import onnx
    from onnx import numpy_helper
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(folder, "model.onnx"))
             .graph.initializer}
    state = module.state_dict()
    for key in state:
        if key.endswith("num_batches_tracked"):
            continue
        if key not in inits:
            sys.exit(f"train_bench_torch: {folder}/model.onnx lacks an initializer for '{key}'")
        a = inits[key].T if key in meta["transposed"] else inits[key]
        if tuple(a.shape) != tuple(state[key].shape):
            sys.exit(f"train_bench_torch: '{key}' expected shape {tuple(state[key].shape)}, "
                     f"found {a.shape} in model.onnx")
        state[key] = torch.from_numpy(a.copy())
    module.load_state_dict(state)


def run(args):
    import torch
    from onnx import load_tensor, numpy_helper
    base_mb = status_mb("VmRSS")  # the runtime loaded, no model yet
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    folder = args.dir.rstrip("/")
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    t0 = time.perf_counter()
    module = build_module(os.path.basename(folder), torch)
    load_onnx_weights(module, folder, meta, torch)
    module.train()
    try:
        opt = torch.optim.AdamW(module.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                fused=True)
        impl = "fused"
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(module.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        impl = "default"
    setup_ms = (time.perf_counter() - t0) * 1e3
    read = lambda n: torch.from_numpy(numpy_helper.to_array(
        load_tensor(os.path.join(folder, f"{n}.pb"))).copy())
    inputs, labels = [read(n) for n in meta["inputs"]], read(meta["labels"])

    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler("cpu") if args.precision == "fp16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        if low is None:
            loss = torch.nn.functional.cross_entropy(module(*inputs), labels)
        else:
            with torch.autocast("cpu", dtype=low):
                loss = torch.nn.functional.cross_entropy(module(*inputs), labels)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss.item()

    losses, ms = [step() for _ in range(args.warmup)], []
    start = time.perf_counter()
    while len(ms) < max(args.iters, 3):
        t0 = time.perf_counter()
        losses.append(step())
        ms.append((time.perf_counter() - t0) * 1e3)
        if len(ms) >= 3 and time.perf_counter() - start > args.max_seconds:
            break
    s = sorted(ms)
    n = len(s)
    print(json.dumps({
        "setup_ms": round(setup_ms, 1),
        "median_ms": s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2,
        "mean_ms": sum(ms) / n, "min_ms": s[0], "runs": n, "losses": losses,
        "base_rss_mb": round(base_mb, 1), "peak_rss_mb": round(status_mb("VmHWM"), 1),
        "torch": torch.__version__, "adamw": impl}))


# ---- the driver ------------------------------------------------------------------------------

def run_json(cmd, env, what):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["failed"]}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": [f"{what} printed no JSON"]}


def table(args):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    common = ["--threads", str(args.threads), "--warmup", str(args.warmup), "--iters",
              str(args.iters), "--max-seconds", str(args.max_seconds), "--lr", str(args.lr),
              "--weight-decay", str(args.weight_decay)]
    if args.precision != "fp32":
        return precision_table(args, env, common)
    load_before = os.getloadavg()
    rows = []
    for name in args.models:
        folder = os.path.join(args.models_dir, name)
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        print(f"[{name}] onyx ...", file=sys.stderr, flush=True)
        onyx = run_json([args.onyx_bench, "--model", os.path.join(folder, "model.onnx"),
                         "--data", folder] + common, env, "onyx_train_bench")
        print(f"[{name}] pytorch ...", file=sys.stderr, flush=True)
        torch_ = run_json([sys.executable, os.path.abspath(__file__), "run", "--dir", folder]
                          + common, env, "train_bench_torch.py run")
        rows.append({"model": name, "batch": meta["batch"], "parameters": meta["parameters"],
                     "threads": args.threads, "onyx": onyx, "torch": torch_})

    fmt_ms = lambda r: f"{r['median_ms']:.1f}" if "median_ms" in r else "error"
    fmt_mb = lambda r: f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "-"
    print("| model | batch | threads | onyx ms/step | PyTorch ms/step | onyx / PyTorch "
          "| onyx peak MB | PyTorch peak MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        o, t = r["onyx"], r["torch"]
        ratio = f"{o['median_ms'] / t['median_ms']:.2f}" if "median_ms" in o and "median_ms" in t \
            else "-"
        print(f"| {r['model']} ({r['parameters'] / 1e6:.1f} M) | {r['batch']} | {r['threads']} | "
              f"{fmt_ms(o)} | {fmt_ms(t)} | {ratio} | {fmt_mb(o)} | {fmt_mb(t)} |")
    print()
    print("Losses of the first two steps (the same batch; step 2 follows one AdamW update):")
    for r in rows:
        o, t = r["onyx"], r["torch"]
        if "losses" not in o or "losses" not in t:
            print(f"  {r['model']}: " + "; ".join(
                f"{k} error: {' '.join(v['error'])}" for k, v in (("onyx", o), ("PyTorch", t))
                if "error" in v))
            continue
        rel = lambda i: abs(o["losses"][i] - t["losses"][i]) / max(1e-12, abs(t["losses"][i]))
        print(f"  {r['model']}: onyx {o['losses'][0]:.6f}, {o['losses'][1]:.6f}; PyTorch "
              f"{t['losses'][0]:.6f}, {t['losses'][1]:.6f}; relative difference "
              f"{rel(0):.1e}, {rel(1):.1e}; timed steps onyx {o['runs']}, PyTorch {t['runs']}; "
              f"RSS before the model onyx {o['base_rss_mb']:.0f} MB, PyTorch "
              f"{t['base_rss_mb']:.0f} MB")
    versions = {r["torch"].get("torch") for r in rows} - {None}
    impls = {r["torch"].get("adamw") for r in rows} - {None}
    print(f"\nPyTorch {', '.join(sorted(versions)) or '?'} "
          f"(AdamW {', '.join(sorted(impls)) or '?'}); "
          f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs (a loaded machine makes both sides slower and noisier)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all("median_ms" in r["onyx"] and "median_ms" in r["torch"] for r in rows) else 1


def precision_table(args, env, common):
    """Four runs per model: onyx and PyTorch, each in float32 and in args.precision."""
    load_before = os.getloadavg()
    p = args.precision
    rows = []
    for name in args.models:
        folder = os.path.join(args.models_dir, name)
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        row = {"model": name, "batch": meta["batch"], "parameters": meta["parameters"],
               "threads": args.threads, "precision": p}
        for prec in ("fp32", p):
            print(f"[{name}] onyx {prec} ...", file=sys.stderr, flush=True)
            row[f"onyx_{prec}"] = run_json(
                [args.onyx_bench, "--model", os.path.join(folder, "model.onnx"), "--data", folder,
                 "--precision", prec] + common, env, "onyx_train_bench")
            print(f"[{name}] pytorch {prec} ...", file=sys.stderr, flush=True)
            row[f"torch_{prec}"] = run_json(
                [sys.executable, os.path.abspath(__file__), "run", "--dir", folder,
                 "--precision", prec] + common, env, "train_bench_torch.py run")
        rows.append(row)

    ms = lambda r: r.get("median_ms")
    cell = lambda r: f"{ms(r):.1f}" if ms(r) else "error"
    ratio = lambda a, b: f"{ms(a) / ms(b):.2f}" if ms(a) and ms(b) else "-"
    mb = lambda r: f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "-"
    print(f"| model | batch | threads | onyx fp32 ms | onyx {p} ms | onyx {p} speed-up | PyTorch fp32 ms "
          f"| PyTorch autocast {p} ms | PyTorch {p} speed-up | onyx {p} / PyTorch {p} "
          f"| peak MB onyx fp32 / {p} | peak MB PyTorch fp32 / {p} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        of, ol, tf, tl = r["onyx_fp32"], r[f"onyx_{p}"], r["torch_fp32"], r[f"torch_{p}"]
        print(f"| {r['model']} ({r['parameters'] / 1e6:.1f} M) | {r['batch']} | {r['threads']} | "
              f"{cell(of)} | {cell(ol)} | {ratio(of, ol)} | {cell(tf)} | {cell(tl)} | {ratio(tf, tl)} | "
              f"{ratio(ol, tl)} | {mb(of)} / {mb(ol)} | {mb(tf)} / {mb(tl)} |")
    print()
    print(f"Losses of the first two steps (the same batch), float32 vs {p}:")
    for r in rows:
        parts = []
        for k in ("onyx_fp32", f"onyx_{p}", "torch_fp32", f"torch_{p}"):
            v = r[k]
            parts.append(f"{k} " + (f"{v['losses'][0]:.5f}, {v['losses'][1]:.5f}" if "losses" in v
                                     else "error: " + " ".join(v.get("error", ["?"]))))
        print(f"  {r['model']}: " + "; ".join(parts))
    print(f"\nload average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs; CPU flags: {cpu_flags()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    keys = ("onyx_fp32", f"onyx_{p}", "torch_fp32", f"torch_{p}")
    return 0 if all(ms(r[k]) for r in rows for k in keys) else 1


def cpu_flags():
    """The low-precision instruction sets this CPU has (what the speed-ups depend on)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return "unknown"
    have = [x for x in ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16") if x in flags]
    return " ".join(have) or "none of avx2/avx512"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode in ("run", "table"):
        p = sub.add_parser(mode)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--warmup", type=int, default=3, help="untimed steps")
        p.add_argument("--iters", type=int, default=10, help="timed steps at most")
        p.add_argument("--max-seconds", type=float, default=60, help="stop timing after this")
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--weight-decay", type=float, default=0.01)
        p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                       help="run: PyTorch under CPU autocast; table: both sides, float32 and this")
    sub.choices["run"].add_argument("--dir", required=True, help="a model folder")
    t = sub.choices["table"]
    t.add_argument("--onyx-bench", required=True, help="path of onyx_train_bench")
    t.add_argument("--models", nargs="+", default=["mlp", "resnet18", "bert"])
    t.add_argument("--models-dir", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "models", "train"))
    t.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if args.warmup < 2:
        ap.error("--warmup must be at least 2 (the loss check compares the first two steps)")
    if args.mode == "run":
        run(args)
        return 0
    return table(args)


if __name__ == "__main__":
    sys.exit(main())
