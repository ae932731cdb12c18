#!/usr/bin/env bash
# Allreduce bandwidth: onyx Communicator vs raw MPI_Allreduce, 1 KB .. 256 MB.
#   bench/run_allreduce.sh                 # 2 ranks, build/ folder
#   NP=4 ONYX_BUILD_DIR=build-x bench/run_allreduce.sh 64   # up to 64 MB
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
cmake --build "$BUILD" --target onyx_allreduce_bench >/dev/null
exec mpirun --allow-run-as-root --oversubscribe -n "${NP:-2}" \
  "$BUILD/bench/onyx_allreduce_bench" "$@"
