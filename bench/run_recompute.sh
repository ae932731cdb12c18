#!/usr/bin/env bash
# Activation recomputation on a GPT-2-style decoder (6 blocks, hidden 256, seq 128): step time
# and peak activation memory (measured, and as planned) without recomputation, recomputing each
# block (the pattern), and recomputing what a memory budget needs (--budget MiB, default 128),
# and the check that the gradients are bit-identical. Exporting the model needs PyTorch in the
# venv (bench/run_train.sh installs it for CPU use).
#   bench/run_recompute.sh [--batch 8] [--steps 5] [--threads 2] [--every 1] [--budget 128]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
MODEL=bench/models/recompute/gpt2.onnx
if [ ! -f "$MODEL" ] && ! "$PY" -c "import torch" 2>/dev/null; then
  echo "bench: exporting the model needs PyTorch in $PY's environment (bench/run_train.sh installs it)" >&2
  exit 1
fi
mkdir -p "$(dirname "$MODEL")"
[ -f "$MODEL" ] || "$PY" bench/gen_recompute_model.py "$MODEL"
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_recompute_bench -j"$(nproc)" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
budget=(--budget 128)
for a in "$@"; do if [ "$a" = --budget ]; then budget=(); fi; done
exec "$BUILD/bench/onyx_recompute_bench" --model "$MODEL" --pattern '^/h\.\d+/' --seq 128 "${budget[@]}" "$@"
