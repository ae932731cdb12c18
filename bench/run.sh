#!/usr/bin/env bash
# One command for the model benchmark: builds onyx_bench, generates the models (first time
# only) and times onyx against ONNX Runtime. Arguments go to bench/run_bench.py, e.g.
#   bench/run.sh                         # all models, 2 threads
#   bench/run.sh --models torch          # only the torch.onnx exports
#   bench/run.sh --models quant          # their int8 versions (onnxruntime.quantization)
#   bench/run.sh --models resnet50 --iters 50 --threads 4
# Environment: ONYX_BUILD_DIR (default build), ONYX_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
if ! "$PY" -c "import numpy, onnx, onnxruntime" 2>/dev/null; then
  echo "bench: $PY lacks numpy/onnx/onnxruntime; run scripts/setup.sh or set ONYX_PYTHON" >&2
  exit 1
fi
# The torch group (the default includes it) exports its models with PyTorch; the quant
# group quantizes those exports.
case " $* " in
  *" --models "*) wants_torch=$(printf '%s\n' "$@" | grep -c '^torch\|^quant' || true) ;;
  *) wants_torch=1 ;;
esac
[ "$wants_torch" = 0 ] || scripts/install_torch.sh "$PY"
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_bench -j"$(nproc)" >/dev/null
exec "$PY" bench/run_bench.py --onyx-bench "$BUILD/bench/onyx_bench" "$@"
