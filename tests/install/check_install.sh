#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it as a project outside the tree would:
# checks libonyx.so's SONAME, that the installed headers are exactly what <onyx/onyx.h>
# includes (no private header) and compile alone, then builds examples/consumer with
# find_package(onyx) and with pkg-config and runs both with LD_LIBRARY_PATH unset.
#   tests/install/check_install.sh BUILD_DIR [ONNX_TESTS_DIR]
# The corpus folder (ONYX_ONNX_TESTS overrides it) gives the consumer a model file to load.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CORPUS=${ONYX_ONNX_TESTS:-${2:-}}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/onyx-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
P=$WORK/prefix
CXX=${CXX:-g++}
unset LD_LIBRARY_PATH
fail() { echo "check_install: $*" >&2; exit 1; }
# Runs a command with its output in $WORK/log, shown only when it fails.
quiet() { "$@" >"$WORK/log" 2>&1 || { cat "$WORK/log"; fail "failed: $*"; }; }

echo "== cmake --install $BUILD --prefix $P"
quiet cmake --install "$BUILD" --prefix "$P"

# 1. The library: one versioned shared object, its SONAME a file beside it.
LIB=$(find "$P" -name libonyx.so)
[[ -n $LIB ]] || fail "no libonyx.so under $P"
LIBDIR=$(dirname "$LIB")
SONAME=$(readelf -d "$LIB" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $SONAME =~ ^libonyx\.so\.[0-9]+(\.[0-9]+)?$ ]] || fail "unexpected SONAME '$SONAME'"
[[ -e $LIBDIR/$SONAME ]] || fail "SONAME $SONAME is not installed in $LIBDIR"
[[ -z $(find "$P" -name '*.a') ]] || fail "static archives installed: $(find "$P" -name '*.a')"
echo "SONAME $SONAME"
"$P/bin/onyx" --version

# 2. Headers: exactly the closure of the umbrellas over onyx headers: <onyx/onyx.h>, and
# <onyx/torch.h> when the `torch` component is installed (its closure needs libtorch's headers,
# from the wheel the installed package names). <onyx/onyx.h> compiles alone;
# check_install_torch.sh compiles <onyx/torch.h>.
INC=$P/include
[[ ! -e $INC/onyx/kernels ]] || fail "private kernel headers installed"
closure() {  # $1: umbrella header; the rest: extra compiler flags
  local header=$1
  shift
  echo "#include <onyx/$header>" >"$WORK/umbrella_$header.cpp"
  "$CXX" -std=c++20 -MM -I"$INC" -I"$INC/onyx" "$@" "$WORK/umbrella_$header.cpp" | tr ' \\' '\n\n' |
    sed -n "s|^$INC/onyx/||p"
}
TORCH_ROOT=
if [[ -e $INC/onyx/torch.h ]]; then
  TORCH_ROOT=$(sed -n 's/^ *set(ONYX_LIBTORCH_ROOT "\([^"]*\)".*/\1/p' "$(find "$P" -name onyxConfig.cmake)")
  [[ -d $TORCH_ROOT/include ]] || fail "<onyx/torch.h> installed, but onyxConfig.cmake names no libtorch ('$TORCH_ROOT')"
fi
{
  closure onyx.h
  [[ -z $TORCH_ROOT ]] ||
    closure torch.h -isystem "$TORCH_ROOT/include" -isystem "$TORCH_ROOT/include/torch/csrc/api/include"
} | sort -u >"$WORK/closure.txt"
(cd "$INC/onyx" && find . -type f | sed 's|^\./||' | sort) >"$WORK/installed.txt"
diff -u "$WORK/installed.txt" "$WORK/closure.txt" ||
  fail "installed headers (-) differ from what <onyx/onyx.h> (and <onyx/torch.h>) include (+):" \
       "update ONYX_PUBLIC_HEADERS (ONYX_TORCH_PUBLIC_HEADERS) in cmake/install.cmake"
"$CXX" -std=c++20 -Wall -Wextra -Werror -fsyntax-only -I"$INC" -I"$INC/onyx" "$WORK/umbrella_onyx.h.cpp" ||
  fail "<onyx/onyx.h> does not compile on its own from the installed tree"
echo "headers: $(wc -l <"$WORK/installed.txt") installed, all reached from <onyx/onyx.h>${TORCH_ROOT:+ and <onyx/torch.h>}"

# 3. The consumer, built with the CMake package; the model file comes from the corpus.
MODEL=${CORPUS:+$CORPUS/node/test_add/model.onnx}
run_consumer() {  # $1: the consumer binary
  local out
  out=$("$1") || fail "$1 failed: $out"
  echo "$out"
  grep -q "tiny model: ok" <<<"$out" || fail "$1: tiny model result wrong"
  if [[ -n $MODEL && -f $MODEL ]]; then
    # test_add: sum = x + y over [3, 4, 5] with x = 0..59 and y = 1..60.
    out=$("$1" "$MODEL") || fail "$1 $MODEL failed: $out"
    echo "$out"
    grep -q "elements of sum add up to 3600$" <<<"$out" || fail "$1: test_add result wrong"
  else
    echo "(no corpus at '$CORPUS': model-file run skipped)"
  fi
}
echo "== find_package(onyx) build of examples/consumer"
quiet cmake -S "$SRC/examples/consumer" -B "$WORK/cmake-build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$P"
quiet cmake --build "$WORK/cmake-build"
# ldd's output in a variable: `ldd | grep -q` under pipefail fails at random when grep -q
# exits on its match before ldd has written everything (SIGPIPE).
deps=$(ldd "$WORK/cmake-build/consumer")
grep -q "libonyx.so.* => $LIBDIR/" <<<"$deps" ||
  fail "consumer does not find $LIBDIR/libonyx.so: $(grep onyx <<<"$deps")"
run_consumer "$WORK/cmake-build/consumer"

# 4. The same program built with pkg-config (which sets no RPATH: the link line adds one).
echo "== pkg-config build of examples/consumer"
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
pkg-config --exists onyx || fail "pkg-config does not find onyx in $PKG_CONFIG_PATH"
echo "pkg-config: onyx $(pkg-config --modversion onyx): $(pkg-config --cflags --libs onyx)"
# shellcheck disable=SC2046
"$CXX" -std=c++20 -O1 "$SRC/examples/consumer/main.cpp" -o "$WORK/consumer-pc" \
  $(pkg-config --cflags --libs onyx) -Wl,-rpath,"$(pkg-config --variable=libdir onyx)"
run_consumer "$WORK/consumer-pc"
echo "check_install: ok"
