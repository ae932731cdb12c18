#!/usr/bin/env bash
# One command for the training benchmark: installs PyTorch into the venv when it is missing,
# builds onyx_train_bench, generates the models (first time only) and times onyx's training
# steps next to PyTorch's. Arguments go to `bench/train_bench_torch.py table`, e.g.
#   bench/run_train.sh                                 # mlp, resnet18, bert; 2 threads
#   bench/run_train.sh --models mlp bert --threads 2 --iters 20
# Environment: ONYX_BUILD_DIR (default build), ONYX_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
if ! "$PY" -c "import numpy, onnx" 2>/dev/null; then
  echo "bench: $PY lacks numpy/onnx; run scripts/setup.sh or set ONYX_PYTHON" >&2
  exit 1
fi

# PyTorch stays out of scripts/requirements.txt (CI must not download it). The PyPI wheel
# depends on several GB of CUDA packages; a CPU run needs only the wheel, its pure-python
# dependencies and the few CUDA libraries libtorch links against that a machine may lack.
torch_ok() { "$PY" -c "import torch; torch.randn(2, 2) @ torch.randn(2, 2)" 2>/dev/null; }
if ! torch_ok; then
  echo "bench: installing PyTorch (CPU use) into $PY's environment" >&2
  "$PY" -m pip install -q --no-deps torch
  "$PY" -m pip install -q filelock typing-extensions sympy networkx jinja2 fsspec
  torch_ok || "$PY" -m pip install -q --no-deps nvidia-cufile nvidia-cusparselt-cu13 \
    nvidia-nvshmem-cu13 nvidia-nccl-cu13
  torch_ok || "$PY" -m pip install -q torch  # the full dependency set, as a last resort
  torch_ok || { echo "bench: PyTorch does not import; see '$PY -c \"import torch\"'" >&2; exit 1; }
fi

[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_train_bench -j"$(nproc)" >/dev/null
"$PY" bench/gen_train_bench_models.py
exec "$PY" bench/train_bench_torch.py table --onyx-bench "$BUILD/bench/onyx_train_bench" "$@"
