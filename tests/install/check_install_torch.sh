#!/usr/bin/env bash
# The installed `torch` component, used as a libtorch project outside the tree would: checks
# libonyx_torch.so (SONAME beside it; RUNPATH to libonyx.so's folder and to libtorch's), then builds
# examples/torch_consumer with find_package(onyx COMPONENTS torch) alone (it brings libtorch) and
# runs it (one SGD step on an ONNX model) with LD_LIBRARY_PATH unset. Headers are
# check_install.sh's job; this build also compiles <onyx/torch.h> with -Wall -Wextra -Werror.
#   tests/install/check_install_torch.sh BUILD_DIR PYTHON MODEL.onnx
set -euo pipefail
BUILD=$(cd "$1" && pwd)
PYTHON=$2
MODEL=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/onyx-install-torch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
P=$WORK/prefix
unset LD_LIBRARY_PATH
fail() { echo "check_install_torch: $*" >&2; exit 1; }
quiet() { "$@" >"$WORK/log" 2>&1 || { cat "$WORK/log"; fail "failed: $*"; }; }

echo "== cmake --install $BUILD --prefix $P"
quiet cmake --install "$BUILD" --prefix "$P"

# 1. The library: versioned, found beside libonyx.so, and libtorch found without help.
LIB=$(find "$P" -name libonyx_torch.so)
[[ -n $LIB ]] || fail "no libonyx_torch.so under $P (was onyx built with ONYX_TORCH?)"
LIBDIR=$(dirname "$LIB")
SONAME=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $SONAME =~ ^libonyx_torch\.so\.[0-9]+(\.[0-9]+)?$ ]] || fail "unexpected SONAME '$SONAME'"
[[ -e $LIBDIR/$SONAME ]] || fail "SONAME $SONAME is not installed in $LIBDIR"
RUNPATH=$(readelf -d "$LIB" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
TORCH_LIB=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
[[ ":$RUNPATH:" == *":\$ORIGIN:"* && ":$RUNPATH:" == *":$TORCH_LIB:"* ]] ||
  fail "libonyx_torch.so's RUNPATH '$RUNPATH' should hold \$ORIGIN and $TORCH_LIB"
deps=$(ldd "$LIB")
grep -q "libonyx.so.* => $LIBDIR/" <<<"$deps" || fail "libonyx_torch.so does not find $LIBDIR/libonyx.so"
! grep -q "not found" <<<"$deps" || fail "libonyx_torch.so has unresolved libraries: $(grep 'not found' <<<"$deps")"
echo "SONAME $SONAME, RUNPATH $RUNPATH"

# 2. The consumer, with onyx's package and torch's.
# Only onyx's package: it brings the wheel's libtorch (onyx::libtorch). The wheel's own
# TorchConfig needs a CUDA toolkit on a machine without one (scripts/check_fresh.sh's root).
echo "== find_package(onyx COMPONENTS torch) build of examples/torch_consumer"
quiet cmake -S "$SRC/examples/torch_consumer" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$P" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror"
quiet cmake --build "$WORK/build"
out=$("$WORK/build/torch_consumer" "$MODEL" 2>&1) || fail "torch_consumer failed: $out"
echo "$out"
grep -q "torch consumer: ok" <<<"$out" || fail "torch_consumer did not finish"
echo "check_install_torch: ok"
