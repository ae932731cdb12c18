#!/usr/bin/env bash
# `onyx launch` / data-parallel `onyx train` failure paths, end to end:
#  - a bad hostfile, an unresolvable host and --data-parallel outside mpirun fail before any
#    training with one clear line;
#  - killing one rank mid-training ends the whole job non-zero, naming the rank, well within
#    the communicator timeout.
#   launch_checks.sh ONYX MODEL.onnx TRAIN_DIR
set -uo pipefail
ONYX=$(readlink -f "$1"); MODEL=$(readlink -f "$2"); DATA=$(readlink -f "$3")
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
fail() { echo "launch_checks: $*"; exit 1; }
expect_error() {  # expect_error PATTERN CMD...: non-zero exit and PATTERN in the output
  local pattern=$1; shift
  if out=$("$@" 2>&1); then fail "expected failure: $*"; fi
  grep -q -- "$pattern" <<<"$out" || fail "expected '$pattern' from: $*; got: $out"
}
printf 'localhost slots=two\n' > "$WORK/bad_hostfile"
expect_error "line 1" "$ONYX" launch -n 2 --hostfile "$WORK/bad_hostfile" -- onyx train "$MODEL"
expect_error "cannot read hostfile" "$ONYX" launch -n 2 --hostfile "$WORK/missing" -- onyx train "$MODEL"
expect_error "does not resolve" "$ONYX" launch -n 2 --hosts no-such-host.invalid:2 -- onyx train "$MODEL"
expect_error "offer 1 slots" "$ONYX" launch -n 2 --hosts localhost:1 -- onyx train "$MODEL"
expect_error "needs several processes" "$ONYX" train "$MODEL" --data "$DATA" --data-parallel

# kill_rank_1 LOG [LAUNCH OPTIONS...]: starts a 2-rank training job, SIGKILLs rank 1 once it
# trains, waits for the job; sets rc and took (seconds from the kill to the job's end).
export OMP_NUM_THREADS=1
kill_rank_1() {
  local log=$1 launcher pid start
  shift
  "$ONYX" launch -n 2 "$@" -- onyx train "$MODEL" --data "$DATA" --batch 4 --epochs 1000 --threads 1 \
    --no-progress --export "$WORK/out.onnx" > "$log" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do grep -q "rank 1/2" "$log" && break; sleep 0.2; done
  grep -q "rank 1/2" "$log" || fail "rank 1 never started: $(cat "$log")"
  sleep 1
  pid=$(pgrep -f "onyx train $MODEL" | while read -r p; do
          tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=1$" && echo "$p"; done | head -1)
  [ -n "$pid" ] || fail "could not find rank 1's process"
  start=$(date +%s)
  kill -9 "$pid"
  wait "$launcher"; rc=$?
  took=$(( $(date +%s) - start ))
}
# The job as users run it: it must end, non-zero, within seconds (Open MPI's mpirun stops
# rank 0 as soon as rank 1 dies).
kill_rank_1 "$WORK/log"
[ "$rc" -ne 0 ] || fail "the job exited 0 after rank 1 was killed"
[ "$took" -le 30 ] || fail "the job took ${took}s to end after rank 1 was killed"
# Again with --enable-recovery, where mpirun leaves rank 0 running and its exit status says
# nothing about the ranks: only onyx's own failure detection (the peer heartbeat, 10 s by
# default) can end rank 0, and it must name rank 1.
kill_rank_1 "$WORK/log_recovery" --mpirun-arg=--enable-recovery
[ "$took" -le 30 ] || fail "with --enable-recovery rank 0 took ${took}s to end after rank 1 was killed"
grep -qE "\[mpi\].*rank 1 not heard from" "$WORK/log_recovery" ||
  fail "onyx did not name rank 1 (expected '[mpi] ... rank 1 not heard from'): $(tail -20 "$WORK/log_recovery")"
echo "launch_checks: bad set-ups refused; killing rank 1 ended the job, and onyx named rank 1 ${took}s after the kill"
