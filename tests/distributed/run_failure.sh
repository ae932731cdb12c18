#!/usr/bin/env bash
# A rank killed (SIGKILL) or stopped (SIGSTOP) mid-collective: the job must end non-zero
# within the communicator timeout (3 s) plus start-up, with a message naming the rank.
#   run_failure.sh <mpirun> <onyx_dist_failure_probe> kill|hang <ranks>
set -u
mpirun=$1 probe=$2 mode=$3 n=$4
victim=$((n - 1))
start=$(date +%s%3N)
out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -n "$n" "$probe" "$mode" 2>&1)
rc=$?
ms=$(($(date +%s%3N) - start))
echo "$out"
echo "run_failure: mode=$mode ranks=$n exit=$rc after ${ms} ms"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
  echo "run_failure: FAIL: expected a non-zero exit before the 60 s guard (got $rc)"; exit 1
fi
if [ "$mode" = hang ]; then
  # Ours: the first survivor to time out names the silent rank (mpirun then stops the rest).
  pattern="rank $victim not heard from"
else
  # Open MPI's mpirun (it kills the survivors) or ours, whichever comes first.
  pattern="rank $victim( with PID| not heard from)"
fi
want=1
got=$(echo "$out" | grep -cE "$pattern")
if [ "$got" -lt "$want" ]; then
  echo "run_failure: FAIL: expected $want message(s) matching '$pattern', found $got"; exit 1
fi
if [ "$ms" -gt 30000 ]; then
  echo "run_failure: FAIL: took ${ms} ms, expected well under 30 s"; exit 1
fi
echo "run_failure: PASS"
