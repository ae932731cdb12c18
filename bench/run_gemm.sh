#!/usr/bin/env bash
# One float32 product per row, onyx next to ONNX Runtime with the GFLOP/s of each
# (bench/run_gemm.py; bench/README.md, "Matrix products alone").
#   bench/run_gemm.sh                          # 1 thread, the bench models' products
#   bench/run_gemm.sh --threads 2 --shapes 32x1024x1024
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
PY=${ONYX_PYTHON:-.venv/bin/python}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_bench -j"$(nproc)" >/dev/null
exec "$PY" bench/run_gemm.py --onyx-bench "$BUILD/bench/onyx_bench" "$@"
