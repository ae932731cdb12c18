#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz) under ASan+UBSan.
#   scripts/fuzz.sh                 # every target, 60 s each
#   scripts/fuzz.sh npy 600         # one target for 10 minutes
#   scripts/fuzz.sh all 20          # CI: every target briefly
# Builds clang++ -DONYX_FUZZ=ON -DONYX_SANITIZE=address,undefined in ${ONYX_SAN_BUILD:-build-san}
# (the same folder scripts/sanitize.sh tests in). Each target first replays its regression
# inputs (tests/fuzz/regressions/<target>/, crashes found and fixed), then fuzzes from its
# corpus in out/fuzz/<target> (kept between runs) plus its seeds: tests/fuzz/seeds/<target>,
# and for `model` and `train` every model.onnx of the ONNX corpus ($ONYX_ONNX_TESTS) and the
# torch.onnx exports of tests/data/torch. A crash, leak,
# sanitizer report, timeout (-timeout=30 s per input) or out-of-memory (6 GB) stops the
# target, leaves the input in out/fuzz/crashes/ and makes this script exit 1. The last lines
# print executions per target.
set -euo pipefail
{  # parsed whole before it runs: editing the file during a long run is safe
cd "$(dirname "$0")/.."
TARGETS=(model train npy checkpoint launch train_config)
which=${1:-all}
seconds=${2:-60}
if [ "$which" != all ] && [[ ! " ${TARGETS[*]} " =~ " $which " ]]; then
  echo "fuzz: unknown target '$which'; targets: ${TARGETS[*]} (or all)" >&2
  exit 2
fi
[ "$which" = all ] && run=("${TARGETS[@]}") || run=("$which")

BUILD=${ONYX_SAN_BUILD:-build-san}
scripts/sanitize.sh --configure-only
cmake --build "$BUILD" -j"$(nproc)" --target fuzz_targets >/dev/null

CORPUS=${ONYX_ONNX_TESTS:-$PWD/../shared/onnx-tests}
mkdir -p out/fuzz/crashes
# A model may legitimately ask for more memory than there is: allocations above 256 MiB fail
# (return null, as malloc does outside ASan when memory is short), so what is tested is onyx's
# own "out of memory allocating N bytes for <tensor>" error rather than the machine's memory;
# libFuzzer's own per-malloc limit is set above that so it never fires first. The cap also
# bounds one node's work: a valid model that tiles or pads into a 300 MB tensor took over
# 30 s in this instrumented build on a busy machine, a timeout that says nothing about onyx.
# Leaks are reported at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=256:detect_leaks=1}
LIMITS=(-rss_limit_mb=6144 -malloc_limit_mb=65536)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=1

status=0
summary=()
for t in "${run[@]}"; do
  bin="$BUILD/tests/fuzz/fuzz_$t"
  dirs=("out/fuzz/$t" "tests/fuzz/seeds/$t")
  mkdir -p "out/fuzz/$t"
  if [ "$t" = model ] || [ "$t" = train ]; then
    # The ONNX corpus's models as seeds, flattened into one folder (copied once).
    seeds=out/fuzz/seeds_model
    if [ ! -d "$seeds" ] && [ -d "$CORPUS" ]; then
      mkdir -p "$seeds.tmp"
      find "$CORPUS" -name model.onnx -size -256k | while read -r m; do
        cp "$m" "$seeds.tmp/$(echo "${m#"$CORPUS"/}" | tr / _)"
      done
      mv "$seeds.tmp" "$seeds"
    fi
    [ -d "$seeds" ] || { echo "fuzz: no ONNX corpus at $CORPUS for the model target's seeds" >&2; exit 1; }
    # What users bring: the torch.onnx exports the tests train (TorchScript and dynamo
    # exporters: transformer encoder/decoder, attention, a BERT layer, GPT-2, CNN with BN).
    rm -rf out/fuzz/seeds_torch && mkdir -p out/fuzz/seeds_torch
    for m in tests/data/torch/*/model*.onnx; do
      cp "$m" "out/fuzz/seeds_torch/$(echo "${m#tests/data/torch/}" | tr / _)"
    done
    dirs=("out/fuzz/$t" "$seeds" out/fuzz/seeds_torch)
  fi
  # Regression inputs: each must now run clean.
  if [ -d "tests/fuzz/regressions/$t" ] && compgen -G "tests/fuzz/regressions/$t/*" >/dev/null; then
    if ! "$bin" "${LIMITS[@]}" tests/fuzz/regressions/$t/* >"out/fuzz/$t.regressions.log" 2>&1; then
      echo "fuzz: $t: a regression input fails again; see out/fuzz/$t.regressions.log" >&2
      status=1
    fi
  fi
  log="out/fuzz/$t.log"
  echo "fuzz: $t for ${seconds}s (log: $log)"
  if "$bin" "${dirs[@]}" -max_total_time="$seconds" -timeout=30 "${LIMITS[@]}" \
       -print_final_stats=1 -artifact_prefix="out/fuzz/crashes/$t-" >"$log" 2>&1; then
    result=ok
  else
    result="FAILED (see $log and out/fuzz/crashes/)"
    status=1
    grep -m5 -E 'ERROR|SUMMARY|deadly|Test unit written' "$log" >&2 || true
  fi
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  summary+=("$(printf '%-14s %12s executions  %s' "$t" "$execs" "$result")")
done
echo "fuzz: target          executions  result (${seconds}s each)"
printf '  %s\n' "${summary[@]}"
exit $status
}
