#!/usr/bin/env bash
# onyx's Python package next to ONNX Runtime's, from Python: builds the package (the build
# tree's build/python/onyx), generates the models (first run only) and times both.
# Arguments go to bench/torch_interop_bench.py, e.g.
#   bench/run_torch_interop.sh                          # mlp and resnet18, 2 threads
#   bench/run_torch_interop.sh --models mlp --threads 1 --iters 500
# Environment: ONYX_BUILD_DIR (default build), ONYX_PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
if ! "$PY" -c "import numpy, onnx, onnxruntime, nanobind" 2>/dev/null; then
  echo "bench: $PY lacks numpy/onnx/onnxruntime/nanobind; run scripts/setup.sh or set ONYX_PYTHON" >&2
  exit 1
fi
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DONYX_PYTHON="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")" >/dev/null
cmake --build "$BUILD" --target onyx_python -j"$(nproc)" >/dev/null
PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" bench/torch_interop_bench.py "$@"
