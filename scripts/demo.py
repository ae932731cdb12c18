#!/usr/bin/env python3
"""The main job, end to end: generate the real example models (an MLP, a CNN and a
two-layer transformer encoder, with float64 numpy references) with tools/gen_models.py,
inspect and run each one with the `onyx` command line, and check every output against the
independent reference. Exits non-zero on any mismatch."""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onyx", default=os.path.join(ROOT, "build", "launcher", "onyx"))
    ap.add_argument("--work", default=os.path.join(ROOT, "out", "demo"))
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()

    models_dir = os.path.join(args.work, "models")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "gen_models.py"), "--out", models_dir],
                   check=True)
    failures = 0
    for model_dir in sorted(glob.glob(os.path.join(models_dir, "*", ""))):
        name = os.path.basename(os.path.dirname(model_dir))
        model = os.path.join(model_dir, "model.onnx")
        print(f"\n=== {name} ===", flush=True)
        subprocess.run([args.onyx, "inspect", model], check=True)
        graph = onnx.load(model).graph
        init_names = {i.name for i in graph.initializer}
        in_names = [i.name for i in graph.input if i.name not in init_names]
        out_names = [o.name for o in graph.output]
        for data_set in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
            run_dir = tempfile.mkdtemp(prefix=f"{name}_", dir=args.work)
            cmd = [args.onyx, "run", model, "--output-dir", run_dir]
            for i, n in enumerate(in_names):
                npy = os.path.join(run_dir, f"in_{i}.npy")
                np.save(npy, load_pb(os.path.join(data_set, f"input_{i}.pb")))
                cmd += ["--input", f"{n}={npy}"]
            subprocess.run(cmd, check=True)
            for i, n in enumerate(out_names):
                want = load_pb(os.path.join(data_set, f"output_{i}.pb")).astype(np.float64)
                got = np.load(os.path.join(run_dir, n.replace("/", "_") + ".npy")).astype(np.float64)
                err = np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))) if want.size else 0.0
                ok = got.shape == want.shape and err <= args.rtol
                failures += not ok
                print(f"{name} {os.path.basename(data_set)} output '{n}' {list(got.shape)}: "
                      f"max relative error vs float64 numpy reference {err:.2e} -> {'OK' if ok else 'MISMATCH'}")
    print("\ndemo: all outputs match the numpy reference" if not failures else f"\ndemo: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
