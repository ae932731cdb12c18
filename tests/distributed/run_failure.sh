#!/usr/bin/env bash
# A rank killed (SIGKILL) or stopped (SIGSTOP) mid-collective: the job must end non-zero
# within the communicator timeout (3 s) plus start-up, and onyx itself must name the rank.
#   run_failure.sh <mpirun> <onyx_dist_failure_probe> kill|hang|slow <ranks>
# With the default timeouts (no 3 s collective timeout; the 10 s peer timeout) a stopped rank
# must be named and the job over within 15 s of the stop; `slow` (a rank 3 s late but alive,
# peer timeout 1 s) must complete on every rank.
# Open MPI's mpirun kills the survivors as soon as a rank dies and says "rank N with PID ...",
# so for a killed rank that text proves nothing about onyx: kill mode runs the job a second
# time with --enable-recovery, where mpirun leaves the survivors running and only onyx's own
# detection ("probe: [mpi] ... rank N not heard from") can end them. A survivor whose thread
# never returns from MPI (Open MPI's TCP transport after the death: one run in six with
# OMPI_MCA_btl=self,tcp, as the sanitizer stage runs) is ended by onyx's MPI watchdog, which
# prints "onyx: [mpi] rank R: a call into MPI has not returned ... rank N not heard from".
set -u
mpirun=$1 probe=$2 mode=$3 n=$4
victim=$((n - 1))
ours="^(probe|onyx): \[mpi\] .*rank $victim not heard from"

# run <label> [mpirun options...]: sets out, rc, ms (PROBE_ARGS: extra probe arguments)
run() {
  local label=$1 start
  shift
  start=$(date +%s%3N)
  out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe "$@" -n "$n" "$probe" "$mode" ${PROBE_ARGS:-} 2>&1)
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

if [ "$mode" = slow ]; then
  run "slow"
  [ "$rc" -eq 0 ] || { echo "run_failure: FAIL: slow: a live but late rank ended the job (exit $rc)"; exit 1; }
  got=$(echo "$out" | grep -c "the slow allreduce completed")
  [ "$got" -eq "$n" ] || { echo "run_failure: FAIL: slow: $got of $n ranks completed"; exit 1; }
  echo "run_failure: PASS"
  exit 0
fi

run "default"
if [ "$rc" -eq 0 ]; then
  echo "run_failure: FAIL: default: expected a non-zero exit"; exit 1
fi
if [ "$mode" = hang ]; then
  # The first survivor to time out names the silent rank (mpirun then stops the rest).
  expect_ours "default"
  # With nothing set, the peer timeout (10 s) names the stopped rank long before the collective
  # timeout (60 s): the survivor says how long after the collective began (right after the stop).
  PROBE_ARGS=--default-timeouts run "default timeouts"
  [ "$rc" -ne 0 ] || { echo "run_failure: FAIL: default timeouts: expected a non-zero exit"; exit 1; }
  expect_ours "default timeouts"
  after=$(echo "$out" | grep -oE "abandoned after [0-9.]+ s" | head -1 | grep -oE "[0-9.]+")
  [ -n "$after" ] || { echo "run_failure: FAIL: default timeouts: no 'abandoned after' line"; exit 1; }
  awk -v a="$after" 'BEGIN { exit !(a <= 15) }' ||
    { echo "run_failure: FAIL: default timeouts: named the rank ${after} s after the stop (> 15 s)"; exit 1; }
  [ "$ms" -le 25000 ] ||
    { echo "run_failure: FAIL: default timeouts: the job took ${ms} ms to end (start-up included)"; exit 1; }
  echo "run_failure: stopped rank named ${after} s after the stop; job over in ${ms} ms"
else
  # mpirun ends the job itself here; onyx must detect the death on its own (mpirun exits 0
  # in recovery mode, so the survivors' diagnosis is what is checked).
  # Rarely (once in some hundred CI runs, under ASan with OMPI_MCA_btl=self,tcp) Open MPI's
  # runtime itself ends the survivors within a second of the death, exit 0 and not a line from
  # them: onyx's 3 s timeout never had its chance, so that attempt says nothing about onyx and
  # runs again (three times at most). A survivor that speaks, or a job past the timeout,
  # is judged as it is.
  for attempt in 1 2 3; do
    run "recovery" --enable-recovery
    if [ "$rc" -eq 0 ] && [ "$ms" -lt 3000 ] && ! echo "$out" | grep -qE "^(probe|onyx): "; then
      echo "run_failure: recovery: attempt $attempt of 3: the MPI runtime ended the job after" \
        "${ms} ms, before the 3 s collective timeout, and no survivor said anything"
      continue
    fi
    break
  done
  expect_ours "recovery"
fi
echo "run_failure: PASS"
