#!/usr/bin/env bash
# A rank killed (SIGKILL) or stopped (SIGSTOP) mid-collective: the job must end non-zero
# within the communicator timeout (3 s) plus start-up, and onyx itself must name the rank.
#   run_failure.sh <mpirun> <onyx_dist_failure_probe> kill|hang <ranks>
# Open MPI's mpirun kills the survivors as soon as a rank dies and says "rank N with PID ...",
# so for a killed rank that text proves nothing about onyx: kill mode runs the job a second
# time with --enable-recovery, where mpirun leaves the survivors running and only onyx's own
# detection ("probe: [mpi] ... rank N not heard from") can end them.
set -u
mpirun=$1 probe=$2 mode=$3 n=$4
victim=$((n - 1))
ours="^probe: \[mpi\] .*rank $victim not heard from"

# run <label> [mpirun options...]: sets out, rc, ms
run() {
  local label=$1 start
  shift
  start=$(date +%s%3N)
  out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe "$@" -n "$n" "$probe" "$mode" 2>&1)
  rc=$?
  ms=$(($(date +%s%3N) - start))
  echo "$out"
  echo "run_failure: $label: mode=$mode ranks=$n exit=$rc after ${ms} ms"
  if [ "$rc" -eq 124 ]; then
    echo "run_failure: FAIL: $label: still running after the 60 s guard"; exit 1
  fi
  if echo "$out" | grep -q "the allreduce completed although"; then
    echo "run_failure: FAIL: $label: a survivor's allreduce completed"; exit 1
  fi
  if [ "$ms" -gt 30000 ]; then
    echo "run_failure: FAIL: $label: took ${ms} ms, expected well under 30 s"; exit 1
  fi
}

# expect_ours <label>: at least one survivor printed onyx's diagnosis naming the victim.
expect_ours() {
  local got
  got=$(echo "$out" | grep -cE "$ours")
  if [ "$got" -lt 1 ]; then
    echo "run_failure: FAIL: $1: no survivor printed onyx's diagnosis matching '$ours'"; exit 1
  fi
}

run "default"
if [ "$rc" -eq 0 ]; then
  echo "run_failure: FAIL: default: expected a non-zero exit"; exit 1
fi
if [ "$mode" = hang ]; then
  # The first survivor to time out names the silent rank (mpirun then stops the rest).
  expect_ours "default"
else
  # mpirun ends the job itself here; onyx must detect the death on its own (mpirun exits 0
  # in recovery mode, so the survivors' diagnosis is what is checked).
  run "recovery" --enable-recovery
  expect_ours "recovery"
fi
echo "run_failure: PASS"
