#!/usr/bin/env bash
# One command for the training benchmark: installs PyTorch into the venv when it is missing
# (scripts/install_torch.sh),
# builds onyx_train_bench, generates the models (first time only) and times onyx's training
# steps next to PyTorch's. Arguments go to `bench/train_bench_torch.py table`, e.g.
#   bench/run_train.sh                                 # mlp, resnet18, bert; 2 threads
#   bench/run_train.sh --models mlp bert --threads 2 --iters 20
#   bench/run_train.sh --precision bf16                # float32 and bf16, onyx and PyTorch autocast
# Environment: ONYX_BUILD_DIR (default build), ONYX_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
if ! "$PY" -c "import numpy, onnx" 2>/dev/null; then
  echo "bench: $PY lacks numpy/onnx; run scripts/setup.sh or set ONYX_PYTHON" >&2
  exit 1
fi

scripts/install_torch.sh "$PY"

[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_train_bench -j"$(nproc)" >/dev/null
"$PY" bench/gen_train_bench_models.py
exec "$PY" bench/train_bench_torch.py table --onyx-bench "$BUILD/bench/onyx_train_bench" "$@"
