#!/usr/bin/env bash
# Soak test: builds onyx_soak, trains a small MLP 10,000 steps and makes 100,000 Session::run
# calls, printing VmRSS every 500 steps / 5,000 runs and the least-squares slope of RSS over
# each phase's second half (KB per 1000 iterations; flat within noise means no leak).
#   bench/soak.sh [BUILD_DIR (default $ONYX_BUILD_DIR or build)] [onyx_soak options, e.g. --steps 2000 --runs 20000]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${ONYX_BUILD_DIR:-build}
if [ $# -gt 0 ] && [[ $1 != --* ]]; then BUILD=$1; shift; fi
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target onyx_soak -j"$(nproc)" >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BUILD/bench/onyx_soak" "$@"
