#!/usr/bin/env python3
"""The main job, end to end, through the `onyx` command line:

1. training: generate the digits MLP (tools/gen_train_models.py) and the digits data
   (tools/prepare_digits.py, from Debian's python3-sklearn), `onyx train` it with metrics,
   checkpoints, a loss plot and an exported model, then `onyx run` the exported model on the
   360 held-out images and compute the accuracy from its .npy output (must be >= 97%);
2. inference: generate the real example models (an MLP, a CNN and a transformer encoder, with
   float64 numpy references) with tools/gen_models.py, run each with `onyx run` and check
   every output against the independent reference.

Exits non-zero on any failure."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def train_digits(onyx, work, min_accuracy):
    """Trains, exports and re-runs the digits MLP; returns True when accuracy is reached."""
    digits = os.path.join(work, "digits")
    run([sys.executable, os.path.join(ROOT, "tools", "gen_train_models.py"), "--out", digits])
    run([sys.executable, os.path.join(ROOT, "tools", "prepare_digits.py"), "--out", digits])
    model = os.path.join(digits, "digits_mlp.onnx")
    trained = os.path.join(digits, "digits_mlp.trained.onnx")
    metrics = os.path.join(digits, "metrics.jsonl")
    plot = os.path.join(digits, "loss.png")
    # Hyperparameters come from a config file; paths from the command line.
    start = time.time()
    run([onyx, "train", model, "--config", os.path.join(ROOT, "examples", "digits_mlp.json"),
         "--data", os.path.join(digits, "train"), "--val-data", os.path.join(digits, "test"),
         "--metrics", metrics, "--checkpoint-dir", os.path.join(digits, "checkpoints"),
         "--checkpoint-every", "200", "--export", trained, "--plot", plot])
    seconds = time.time() - start
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    steps = [j for j in lines if j["type"] == "step"]
    print(f"demo: {len(steps)} steps in {seconds:.1f} s, loss {steps[0]['loss']:.3f} -> "
          f"{steps[-1]['loss']:.4f}; metrics in {metrics}, loss curve in {plot}")

    out = os.path.join(digits, "run")
    run([onyx, "run", trained, "--input", "x=" + os.path.join(digits, "test", "x.npy"),
         "--output-dir", out])
    logits = np.load(os.path.join(out, "logits.npy"))
    labels = np.load(os.path.join(digits, "test", "labels.npy"))
    accuracy = float(np.mean(np.argmax(logits, axis=1) == labels))
    ok = accuracy >= min_accuracy
    print(f"demo: the trained model ({trained}) classifies {accuracy:.2%} of the {len(labels)} "
          f"held-out digits correctly -> {'OK' if ok else f'BELOW {min_accuracy:.0%}'}\n")
    return ok


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def check_inference_models(onyx, work, rtol):
    """Runs tools/gen_models.py's models; returns the number of mismatching outputs."""
    models_dir = os.path.join(work, "models")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_models.py"), "--out",
                    models_dir], check=True)
    failures = 0
    for model_dir in sorted(glob.glob(os.path.join(models_dir, "*", ""))):
        name = os.path.basename(os.path.dirname(model_dir))
        model = os.path.join(model_dir, "model.onnx")
        print(f"\n=== {name} ===", flush=True)
        subprocess.run([onyx, "inspect", model], check=True)
        graph = onnx.load(model).graph
        init_names = {i.name for i in graph.initializer}
        in_names = [i.name for i in graph.input if i.name not in init_names]
        out_names = [o.name for o in graph.output]
        for data_set in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
            run_dir = tempfile.mkdtemp(prefix=f"{name}_", dir=work)
            cmd = [onyx, "run", model, "--output-dir", run_dir]
            for i, n in enumerate(in_names):
                npy = os.path.join(run_dir, f"in_{i}.npy")
                np.save(npy, load_pb(os.path.join(data_set, f"input_{i}.pb")))
                cmd += ["--input", f"{n}={npy}"]
            subprocess.run(cmd, check=True)
            for i, n in enumerate(out_names):
                want = load_pb(os.path.join(data_set, f"output_{i}.pb")).astype(np.float64)
                got = np.load(os.path.join(run_dir, n.replace("/", "_") + ".npy")).astype(np.float64)
                err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))) if want.size else 0.0
                ok = got.shape == want.shape and err <= rtol
                failures += not ok
                print(f"{name} {os.path.basename(data_set)} output '{n}' {list(got.shape)}: "
                      f"max relative error vs float64 numpy reference {err:.2e} -> "
                      f"{'OK' if ok else 'MISMATCH'}")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onyx", default=os.path.join(ROOT, "build", "launcher", "onyx"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "demo"))
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--min-accuracy", type=float, default=0.97)
    ap.add_argument("--skip-inference", action="store_true", help="only the training part")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    print("=== training: the digits MLP with `onyx train` ===", flush=True)
    trained_ok = train_digits(args.onyx, args.work, args.min_accuracy)
    failures = 0
    if not args.skip_inference:
        print("=== inference: real models against float64 numpy references ===", flush=True)
        failures = check_inference_models(args.onyx, args.work, args.rtol)
    print(f"\ndemo: training {'reached' if trained_ok else 'MISSED'} {args.min_accuracy:.0%} "
          f"test accuracy; inference: {failures} mismatches")
    return 0 if trained_ok and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
