#!/usr/bin/env bash
# onyx's Python package next to its peers, from Python: builds the package (the build tree's
# build/python/onyx), generates the models (first run only), then prints two tables:
#   inference: onyx.InferenceSession vs onnxruntime.InferenceSession (torch_interop_bench.py)
#   training:  onyx.torch.wrap(module) vs eager PyTorch, AdamW steps (torch_wrap_bench.py)
# Arguments before `--` go to the inference bench, after it to the training bench, e.g.
#   bench/run_torch_interop.sh                          # both tables, 2 threads
#   bench/run_torch_interop.sh --models mlp --threads 1 -- --models mlp bert --threads 1
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
infer_args=() train_args=() seen_sep=0
for a in "$@"; do
  if [ "$a" = "--" ] && [ $seen_sep = 0 ]; then seen_sep=1; continue; fi
  if [ $seen_sep = 0 ]; then infer_args+=("$a"); else train_args+=("$a"); fi
done
export PYTHONPATH="$PWD/$BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
"$PY" bench/torch_interop_bench.py "${infer_args[@]}"
scripts/install_torch.sh "$PY"
"$PY" bench/gen_train_bench_models.py
"$PY" bench/torch_wrap_bench.py "${train_args[@]}"
