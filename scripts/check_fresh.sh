#!/usr/bin/env bash
# Checks the README's promise on a fresh Debian 12 system: builds a minimal Debian 12 root
# with debootstrap, copies a clean clone of this repository's committed state (and ../shared)
# into it, and runs `scripts/demo.sh` and `scripts/test.sh` there under chroot with a clean
# environment, so a package scripts/setup.sh forgets to install fails here and not on a
# user's machine. Needs root (debootstrap, mount, chroot), the Debian registry, PyPI and
# time (two full builds). Not part of .ci/run; run it before resolving an issue that changes
# dependencies.
#
#   scripts/check_fresh.sh [options]
#     --commit REF      commit of this repository to check (default HEAD; committed state
#                       only, uncommitted changes are not seen)
#     --only demo|test  run only one of the two README commands
#     --root DIR        where the Debian root is built (default /var/tmp/onyx-check-fresh/root;
#                       a root this script made earlier is removed first)
#     --log-dir DIR     logs (default: logs/<time>-<commit> beside the root)
#     --mirror URL      Debian mirror (default: the host's apt sources)
#     --tarball FILE    cache of the bare debootstrap result (Debian packages only, nothing of
#                       ours): unpacked if FILE exists, written after debootstrap otherwise
#     --keep            keep the root afterwards (default: removed on success, kept on failure)
#     --reuse           run in a root kept from an earlier run instead of a fresh one: the clone
#                       there moves to --commit, its build/ and .venv/ stay. NOT a fresh check;
#                       for re-running one step after a fix. Implies --keep.
#
# Prints one line per command (PASS/FAIL, duration, log) and exits non-zero if either failed.
set -euo pipefail
{  # bash parses this block whole before running it: editing or checking out the file mid-run is safe

SUITE=bookworm
# What a fresh Debian 12 machine has, beyond the minbase root, before a user runs the README:
# the user got the repository with `git clone`, so git is there, and ca-certificates with it
# (cloning over https). Nothing else: whatever more the project needs, setup.sh must install.
PREINSTALLED=(git ca-certificates)
BASE_ID="debian-$SUITE-minbase+$(IFS=,; echo "${PREINSTALLED[*]}")"
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { echo "check_fresh: $*"; }
die() { echo "check_fresh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

BASE=/var/tmp/onyx-check-fresh
ROOT=$BASE/root; LOG_DIR=""; REF=HEAD; ONLY=""; MIRROR=""; TARBALL=""; KEEP=0; REUSE=0
while (($#)); do
  case "$1" in
    --commit) REF=${2:?--commit needs a value}; shift 2 ;;
    --only) ONLY=${2:?--only needs demo or test}; shift 2 ;;
    --root) ROOT=${2:?--root needs a directory}; shift 2 ;;
    --log-dir) LOG_DIR=${2:?--log-dir needs a directory}; shift 2 ;;
    --mirror) MIRROR=${2:?--mirror needs a URL}; shift 2 ;;
    --tarball) TARBALL=${2:?--tarball needs a file}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --reuse) REUSE=1; KEEP=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
case "$ONLY" in "") STEPS=(demo test) ;; demo|test) STEPS=("$ONLY") ;; *) die "--only takes demo or test" ;; esac

[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, mount and chroot need it): sudo $0 $*"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
[ "$(dpkg --print-architecture)" = amd64 ] || die "only amd64 hosts are supported"

REPO=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
SHARED=$(cd "$REPO/.." && pwd)/shared
[ -d "$SHARED/onnx-tests" ] || die "no $SHARED/onnx-tests beside the repository (the tests need it)"
COMMIT=$(git -C "$REPO" rev-parse --verify "$REF^{commit}") || die "not a commit: $REF"
SHORT=${COMMIT:0:12}
[ -z "$(git -C "$REPO" status --porcelain --untracked-files=no)" ] || [ "$REF" != HEAD ] ||
  say "note: $REPO has uncommitted changes; they are not part of the check (committed state only)"

mkdir -p "$(dirname "$ROOT")"
ROOT=$(realpath -m "$ROOT")
case "$ROOT" in /|/var|/var/tmp|/tmp|/work|/root|/home|"") die "refusing --root $ROOT" ;; esac
[[ "$ROOT" =~ ^[A-Za-z0-9_./-]+$ ]] || die "--root must be a plain path (letters, digits, _ . / -)"
[ "$(stat -f -c %T "$(dirname "$ROOT")")" != tmpfs ] ||
  die "$(dirname "$ROOT") is a tmpfs; the root needs ~4 GB of disk: choose --root elsewhere"
free_gb=$(($(df -Pk "$(dirname "$ROOT")" | awk 'NR==2 {print $4}') / 1024 / 1024))
((free_gb >= 6)) || say "warning: only ${free_gb} GB free under $(dirname "$ROOT"); a run needs ~4 GB"
LOG_DIR=${LOG_DIR:-$(dirname "$ROOT")/logs/$(date +%Y%m%d-%H%M%S)-$SHORT}
mkdir -p "$LOG_DIR"
LOG_DIR=$(realpath "$LOG_DIR")
case "$LOG_DIR/" in "$ROOT"/*) die "--log-dir must be outside the root" ;; esac
MARKER=$ROOT/.onyx-check-fresh

# One run per root at a time.
exec 9>"$ROOT.lock"
flock -n 9 || die "another check_fresh run is using $ROOT"

# ---- mounts and cleanup ------------------------------------------------------------------
mounts_under() {  # mount points at or below $ROOT, in mount order
  awk -v r="$ROOT" '{ m = $5; gsub(/\\040/, " ", m); if (m == r || index(m, r "/") == 1) print m }' \
    /proc/self/mountinfo
}
# shellcheck disable=SC2317  # (called from the EXIT trap)
stop_processes() {  # anything still running with the root as its /
  local p pids=()
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && pids+=("${p#/proc/}")
  done
  ((${#pids[@]})) || return 0
  say "stopping processes left in the root: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null
  sleep 3
  for p in "${pids[@]}"; do
    [ "$(readlink "/proc/$p/root" 2>/dev/null)" = "$ROOT" ] && kill -KILL "$p" 2>/dev/null
  done
  return 0
}
unmount_all() {  # children first; a busy one is detached lazily
  local m
  local -a ms
  for _ in 1 2 3; do
    mapfile -t ms < <(mounts_under | tac)
    ((${#ms[@]})) || return 0
    for m in "${ms[@]}"; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
  done
  mapfile -t ms < <(mounts_under)
  ((${#ms[@]} == 0)) || { say "still mounted: ${ms[*]}"; return 1; }
}
remove_root() {
  unmount_all || die "mounts left under $ROOT; not removing it"
  [ -z "$(mounts_under)" ] || die "mounts left under $ROOT; not removing it"
  rm -rf --one-file-system "$ROOT"
}
RESULT=1
# shellcheck disable=SC2317  # (the EXIT trap)
cleanup() {
  set +e
  stop_processes
  if ! unmount_all; then
    say "could not unmount everything under $ROOT; left as is (see: grep $ROOT /proc/self/mountinfo)"
  elif ((KEEP)); then
    say "root kept: $ROOT (rerun a step with: $0 --root $ROOT --reuse --only test)"
  elif ((RESULT != 0)) && [ -e "$MARKER" ]; then
    say "root kept for inspection (failed): $ROOT (remove it with: rm -rf --one-file-system $ROOT)"
  elif [ -e "$MARKER" ] && [ -z "$(mounts_under)" ]; then
    rm -rf --one-file-system "$ROOT" && say "root removed"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

mount_all() {
  mount --bind "$ROOT" "$ROOT"              # a mount point, so `ip netns exec` can rslave /
  mount --make-rprivate "$ROOT"             # nothing propagates back to the host
  mount -t proc proc "$ROOT/proc"
  mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
  mount --bind /dev "$ROOT/dev"
  mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
  mount -t devpts -o newinstance,gid=5,mode=620,ptmxmode=666 devpts "$ROOT/dev/pts"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
  mount -t tmpfs -o mode=755,nosuid,nodev run "$ROOT/run"
}

# ---- the apt sources the root gets: the host's Debian ones --------------------------------
host_sources() {  # "URI SUITE COMPONENTS..." per enabled deb entry of the host
  local f
  [ -f /etc/apt/sources.list ] &&
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' /etc/apt/sources.list | awk '$1 == "deb" { $1 = ""; print }'
  for f in /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" { $1 = ""; print }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no")
             for (i = 1; i <= ns; i++) print uri, s[i], comps
           types = ""; uri = ""; comps = ""; enabled = ""; ns = 0 }
         /^[[:space:]]*#/ { next }
         /^[[:space:]]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
           if (key == "types") types = $0
           else if (key == "uris") { split($0, u, " "); uri = u[1] }
           else if (key == "suites") ns = split($0, s, " ")
           else if (key == "components") comps = $0
           else if (key == "enabled") enabled = tolower($0) }
         END { flush() }' "$f"
  done
  return 0
}
HOST_SOURCES=$(host_sources | awk '{ $1 = $1; print }')
source_for() { awk -v s="$1" '$2 == s { print; exit }' <<<"$HOST_SOURCES"; }
MAIN_SRC=$(source_for "$SUITE"); UPDATES_SRC=$(source_for "$SUITE-updates")
SECURITY_SRC=$(source_for "$SUITE-security")
if [ -z "$MAIN_SRC" ]; then
  say "no $SUITE source in the host's apt sources; using the standard Debian mirrors"
  MAIN_SRC="http://deb.debian.org/debian $SUITE main"
  UPDATES_SRC="http://deb.debian.org/debian $SUITE-updates main"
  SECURITY_SRC="http://deb.debian.org/debian-security $SUITE-security main"
fi
[ -n "$MIRROR" ] && MAIN_SRC="$MIRROR ${MAIN_SRC#* }"
MIRROR=${MAIN_SRC%% *}
APT_PROXY=$(apt-config dump | grep -i '^Acquire::[a-z]*::Proxy ' || true)
PROXY_ENV=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && PROXY_ENV+=("$v=${!v}")
done
if [ -n "$APT_PROXY" ] && [ -z "${http_proxy:-}" ]; then  # debootstrap fetches with wget
  p=$(sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/ip' <<<"$APT_PROXY" | head -1)
  [ -n "$p" ] && [ "$p" != DIRECT ] && export http_proxy=$p
fi

write_root_config() {
  local f=$ROOT/etc/apt/sources.list.d/debian.sources src uri suites comps keyring=""
  [ -f "$ROOT/usr/share/keyrings/debian-archive-keyring.gpg" ] &&
    keyring="Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
  : >"$f"
  for src in "$MAIN_SRC|$UPDATES_SRC" "$SECURITY_SRC"; do
    local a=${src%%|*} b=""
    [[ "$src" == *"|"* ]] && b=${src#*|}
    [ -n "$a" ] || continue
    read -r uri suites comps <<<"$a"
    [ -n "$b" ] && suites="$suites $(awk '{print $2}' <<<"$b")"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n%s\n\n' \
      "$uri" "$suites" "${comps:-main}" "$keyring" >>"$f"
  done
  rm -f "$ROOT/etc/apt/sources.list"
  if [ -n "$APT_PROXY" ]; then
    echo "$APT_PROXY" >"$ROOT/etc/apt/apt.conf.d/01proxy"   # apt-config dump prints apt.conf lines
  fi
  # Machine configuration, not packages: name resolution as on the host, and the CAs its
  # administrator added (/usr/local/share/ca-certificates; e.g. a TLS-intercepting proxy's,
  # without which pip cannot reach PyPI).
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  cp -L /etc/hosts "$ROOT/etc/hosts"
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    say "adding the host's local CAs: $(cd /usr/local/share/ca-certificates && echo *.crt)"
    cp -L /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
    chroot "$ROOT" /usr/sbin/update-ca-certificates >/dev/null 2>&1 ||
      die "update-ca-certificates failed in the root"
  fi
}

# ---- the root ----------------------------------------------------------------------------
T0=$SECONDS
fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
if ((REUSE)); then
  if [ ! -e "$MARKER" ] || [ ! -d "$ROOT/work/onyx/.git" ]; then
    die "--reuse: no root from an earlier run at $ROOT"
  fi
  say "REUSING $ROOT (not a fresh check): moving its clone to $SHORT"
  git -C "$ROOT/work/onyx" fetch --quiet --no-tags "$REPO" '+refs/heads/*:refs/remotes/origin/*' HEAD
  git -C "$ROOT/work/onyx" checkout --quiet --force --detach "$COMMIT"
  ROOT_KIND="reused root (NOT fresh)"
else
  if [ -e "$ROOT" ] && [ -n "$(ls -A "$ROOT")" ]; then
    [ -e "$MARKER" ] || die "$ROOT exists and was not made by this script; remove it or pick --root"
    say "removing the root of an earlier run: $ROOT"
    remove_root
  fi
  mkdir -p "$ROOT"
  echo "made by scripts/check_fresh.sh; removed by its next run" >"$MARKER"
  if [ -n "$TARBALL" ] && [ -f "$TARBALL" ]; then
    say "unpacking the cached debootstrap result $TARBALL"
    tar -C "$ROOT" --numeric-owner -xpf "$TARBALL"
    [ "$(cat "$ROOT/etc/onyx-check-fresh-base" 2>/dev/null)" = "$BASE_ID" ] ||
      die "$TARBALL is not a $BASE_ID root of this script; delete it to rebuild it"
    FROM_TARBALL=" (debootstrap result cached in $TARBALL)"
  else
    say "debootstrap --variant=minbase --include=$(IFS=,; echo "${PREINSTALLED[*]}") $SUITE from $MIRROR (log: $LOG_DIR/debootstrap.log)"
    if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${PREINSTALLED[*]}")" \
        "$SUITE" "$ROOT" "$MIRROR" >"$LOG_DIR/debootstrap.log" 2>&1; then
      tail -n 30 "$LOG_DIR/debootstrap.log"
      die "debootstrap failed (log: $LOG_DIR/debootstrap.log)"
    fi
    echo "$BASE_ID" >"$ROOT/etc/onyx-check-fresh-base"
    unmount_all || die "debootstrap left mounts under $ROOT"
    if [ -n "$TARBALL" ]; then
      say "caching the debootstrap result in $TARBALL"
      tar -C "$ROOT" --numeric-owner --exclude=./.onyx-check-fresh -capf "$TARBALL.part" . &&
        mv "$TARBALL.part" "$TARBALL"
    fi
  fi
  write_root_config
  say "cloning $REPO at $SHORT into $ROOT/work/onyx, copying $SHARED to $ROOT/work/shared"
  mkdir -p "$ROOT/work"
  git clone --quiet --no-local --no-checkout "$REPO" "$ROOT/work/onyx"
  git -C "$ROOT/work/onyx" checkout --quiet --detach "$COMMIT"
  cp -a "$SHARED" "$ROOT/work/shared"
  ROOT_KIND="fresh $BASE_ID root${FROM_TARBALL:-}"
fi
PREP_S=$((SECONDS - T0))
say "root ready in $(fmt $PREP_S): $ROOT, $ROOT_KIND"

mount_all

# ---- the README's commands ---------------------------------------------------------------
CHROOT_ENV=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash "PATH=$CHROOT_PATH" TERM=dumb
            LANG=C.UTF-8 "${PROXY_ENV[@]}")
declare -A STATUS DURATION
FAILED=0
for step in "${STEPS[@]}"; do
  log=$LOG_DIR/$step.log
  say "running scripts/$step.sh in the root (log: $log)"
  {
    echo "# check_fresh: scripts/$step.sh at $COMMIT in $ROOT_KIND"
    echo "# env -i ${CHROOT_ENV[*]}"
  } >"$log"
  t=$SECONDS
  # In the background so that a signal to this script runs the EXIT trap at once (bash waits
  # for a foreground command to end first); with pipefail, wait reports chroot's status.
  chroot "$ROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" /bin/bash -c "cd /work/onyx && scripts/$step.sh" \
    </dev/null 2>&1 | tee -a "$log" &
  rc=0; wait $! || rc=$?
  DURATION[$step]=$((SECONDS - t))
  if ((rc == 0)); then STATUS[$step]=PASS; else STATUS[$step]="FAIL (exit $rc)"; FAILED=1; fi
  echo "# check_fresh: exit $rc after $(fmt "${DURATION[$step]}")" >>"$log"
done

# ---- summary -----------------------------------------------------------------------------
{
  echo "check_fresh: ---- summary: commit $SHORT, $ROOT_KIND, mirror $MIRROR"
  printf 'check_fresh: %-6s %-16s %8s\n' root ready "$(fmt $PREP_S)"
  for step in "${STEPS[@]}"; do
    printf 'check_fresh: %-6s %-16s %8s  log: %s\n' "$step" "${STATUS[$step]}" \
      "$(fmt "${DURATION[$step]}")" "$LOG_DIR/$step.log"
  done
  for step in "${STEPS[@]}"; do
    [ "${STATUS[$step]}" = PASS ] && continue
    echo "check_fresh: ---- last lines of $step.log"
    tail -n 40 "$LOG_DIR/$step.log"
  done
  if ((FAILED)); then echo "check_fresh: FAILED"; else echo "check_fresh: PASSED"; fi
} | tee "$LOG_DIR/summary.txt"
RESULT=$FAILED
exit "$FAILED"
}
