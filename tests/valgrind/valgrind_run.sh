#!/usr/bin/env bash
# Runs `onyx run` on the generated real models under valgrind (memcheck): the default build
# must contain no instruction valgrind cannot decode (it stops at AVX-512 ones, so an
# -march=native build fails here on such a host) and make no invalid read, write or jump.
#   valgrind_run.sh ONYX MODELS_DIR
set -euo pipefail
onyx=$1
models=$2
if ! command -v valgrind >/dev/null; then
  echo "valgrind_run: valgrind is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for name in mlp cnn transformer; do
  model="$models/$name/model.onnx"
  [ -f "$model" ] || { echo "valgrind_run: $model is missing (build onyx_test_models)" >&2; exit 1; }
  echo "== valgrind onyx run $name"
  # Under valgrind's CPUID the kernels take their AVX2 variants and oneDNN its AVX2 code.
  valgrind --error-exitcode=99 --track-origins=no --quiet \
    "$onyx" run "$model" --random --threads 2 --output-dir "$out/$name"
  ls "$out/$name"/*.npy >/dev/null
done
echo "valgrind_run: 3 models ran clean"
