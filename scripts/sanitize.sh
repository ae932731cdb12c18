#!/usr/bin/env bash
# The tests again under sanitizers, each build in its own folder (clang; ccache keeps
# rebuilds cheap):
#   scripts/sanitize.sh            # both stages below
#   scripts/sanitize.sh asan       # ASan+UBSan (build-san): the unit, autodiff, training and
#                                  #   distributed tests, and tests/validation/bad_attributes.py
#   scripts/sanitize.sh tsan       # TSan (build-tsan): concurrent sessions and the MPI
#                                  #   communicator (heartbeats, async collectives, failures)
#   scripts/sanitize.sh --configure-only   # configure build-san only (scripts/fuzz.sh)
# Any sanitizer report aborts the process, so the test that provoked it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
SAN=${ONYX_SAN_BUILD:-build-san}
TSAN=${ONYX_TSAN_BUILD:-build-tsan}
PY=${ONYX_PYTHON:-$PWD/.venv/bin/python}
command -v clang++ >/dev/null || { echo "sanitize: clang++ missing; scripts/setup.sh installs it" >&2; exit 1; }
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}

configure() {  # folder, sanitizers, extra cmake args...
  local dir=$1 san=$2
  shift 2
  # -O1: sanitizer reports stay precise and the tests stay within their time limits.
  CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 \
    -DONYX_SANITIZE="$san" -DONYX_TORCH=OFF -DONYX_BUILD_PYTHON=OFF -DONYX_BUILD_BENCH=OFF \
    -DONYX_PYTHON="$PY" "$@" >/dev/null
}

configure_asan() { configure "$SAN" address,undefined -DONYX_FUZZ=ON; }
if [ "$what" = --configure-only ]; then
  configure_asan
  exit 0
fi

# Sanitizer runtime settings for every test process (and the ranks mpirun starts, which
# inherit the environment). allocator_may_return_null: a test asks for an impossible
# allocation to check onyx's own error for it.
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
# Open MPI's shared-memory transport and its progress thread are not instrumented.
export OMPI_MCA_btl=self,tcp

if [ "$what" = all ] || [ "$what" = asan ]; then
  echo "sanitize: ASan+UBSan build in $SAN"
  configure_asan
  cmake --build "$SAN" -j"$(nproc)" --target onyx onyx_unit_tests onyx_autodiff_tests onyx_training_tests \
    onyx_distributed_tests onyx_dist_failure_probe >/dev/null
  # The CLI tests run the sanitized `onyx` binary.
  ctest --test-dir "$SAN" --output-on-failure -j"$(nproc)" -L '^(unit|autodiff|training)$' --timeout 900
  # Open MPI is built without frame pointers: the leak checker's fast unwinder stops in it, so
  # its allocations would not reach tests/lsan.supp's Open MPI entries; unwind fully here.
  ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 \
    ctest --test-dir "$SAN" --output-on-failure -L '^distributed$' --timeout 900
  # Every op's out-of-range attributes (tests/validation/bad_attributes.py) through the
  # sanitized `onyx run`: an out-of-bounds read the release build survives fails here.
  # Allocations above 2 GiB fail as on a machine without the memory (onyx's own error).
  ASAN_OPTIONS=$ASAN_OPTIONS:max_allocation_size_mb=2048 \
    "$PY" tests/validation/bad_attributes.py --onyx "$SAN/launcher/onyx" --jobs "$(nproc)" --max-memory-gb 0 \
    --timeout 60
fi

if [ "$what" = all ] || [ "$what" = tsan ]; then
  echo "sanitize: TSan build in $TSAN"
  configure "$TSAN" thread
  cmake --build "$TSAN" -j"$(nproc)" --target onyx_unit_tests onyx_distributed_tests >/dev/null
  # Threads inside one process: concurrent Session::run, optimizer and kernel thread pools.
  "$TSAN/tests/unit/onyx_unit_tests" \
    --gtest_filter='Session.ConcurrentRunsFromFourThreads:RealModels.TransformerConcurrentRuns:Nchwc.ConcurrentRunsOfMixedBatches:Binary.LargeBroadcastOnManyThreads*:OptimThreads.*'
  # The communicator's heartbeat and progress threads against its collectives, 2 and 3 ranks.
  ctest --test-dir "$TSAN" --output-on-failure -R '^distributed_np[23]$' --timeout 900
fi
