#!/usr/bin/env bash
# The portable build (x86-64-v3 + run-time ISA dispatch) next to an -march=native build:
# builds onyx_bench in build/ and build-native/ (ONYX_NATIVE=ON), then bench/run_isa.py.
#   bench/run_isa.sh [--models mlp resnet18 bert_base] [--rounds 3] [--threads 2]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
NATIVE=${ONYX_NATIVE_BUILD_DIR:-build-native}
PY=${ONYX_PYTHON:-.venv/bin/python}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
[ -f "$NATIVE/CMakeCache.txt" ] ||
  cmake -S . -B "$NATIVE" -DCMAKE_BUILD_TYPE=Release -DONYX_NATIVE=ON -DONYX_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target onyx_bench -j"$(nproc)" >/dev/null
cmake --build "$NATIVE" --target onyx_bench -j"$(nproc)" >/dev/null
exec "$PY" bench/run_isa.py --portable "$BUILD/bench/onyx_bench" \
  --native "$NATIVE/bench/onyx_bench" "$@"
