#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces onyx_h1 and onyx_h2 joined by a veth pair,
# each with its own hostname (UTS namespace). mpirun runs in h1; its remote agent enters h2
# instead of ssh. `onyx launch --hostfile` trains 2 ranks, one per host, over TCP.
#   two_hosts.sh ONYX MODEL.onnx TRAIN_DIR
# Exit 77 (skipped) without root or network-namespace support.
set -euo pipefail
ONYX=$(readlink -f "$1"); MODEL=$(readlink -f "$2"); DATA=$(readlink -f "$3")
[ "$(id -u)" -eq 0 ] || { echo "two_hosts: needs root for network namespaces; skipped"; exit 77; }
WORK=$(mktemp -d)
cleanup() {
  ip netns del onyx_h1 2>/dev/null || true
  ip netns del onyx_h2 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup; WORK=$(mktemp -d)
ip netns add onyx_h1 || { echo "two_hosts: cannot create network namespaces; skipped"; exit 77; }
ip netns add onyx_h2
ip link add onyx_v1 type veth peer name onyx_v2
ip link set onyx_v1 netns onyx_h1
ip link set onyx_v2 netns onyx_h2
ip -n onyx_h1 addr add 10.231.0.1/24 dev onyx_v1
ip -n onyx_h2 addr add 10.231.0.2/24 dev onyx_v2
for ns in onyx_h1 onyx_h2; do
  ip -n $ns link set lo up
done
ip -n onyx_h1 link set onyx_v1 up
ip -n onyx_h2 link set onyx_v2 up

printf '10.231.0.1 slots=1\n10.231.0.2 slots=1\n' > "$WORK/hostfile"
# mpirun calls the agent like ssh: AGENT [options] HOST COMMAND...
cat > "$WORK/agent.sh" <<'AGENT'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case $host in
  10.231.0.1) ns=onyx_h1; name=h1 ;;
  10.231.0.2) ns=onyx_h2; name=h2 ;;
  *) echo "agent: unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec $ns unshare --uts sh -c "hostname $name; $*"
AGENT
chmod +x "$WORK/agent.sh"
cd "$WORK"
export OMP_NUM_THREADS=1
ip netns exec onyx_h1 unshare --uts sh -c "hostname h1; exec \"$ONYX\" launch -n 2 \
  --hostfile \"$WORK/hostfile\" --launch-agent \"$WORK/agent.sh\" \
  --mpirun-arg '--mca btl tcp,self' --mpirun-arg '--mca btl_tcp_if_include 10.231.0.0/24' \
  --mpirun-arg '--mca oob_tcp_if_include 10.231.0.0/24' \
  -- onyx train \"$MODEL\" --data \"$DATA\" --batch 16 --epochs 2 --threads 1 --no-progress \
  --export \"$WORK/out.onnx\"" 2>&1 | tee "$WORK/log"
grep -q "rank 0/2 on host h1" "$WORK/log" || { echo "two_hosts: rank 0 did not run on h1"; exit 1; }
grep -q "rank 1/2 on host h2" "$WORK/log" || { echo "two_hosts: rank 1 did not run on h2"; exit 1; }
[ -s "$WORK/out.onnx" ] || { echo "two_hosts: no exported model"; exit 1; }
echo "two_hosts: 2 ranks trained across two network namespaces"
