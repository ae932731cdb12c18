#!/usr/bin/env bash
# Installs what onyx needs to build, test and benchmark on Debian 12, then configures
# and builds it. Idempotent: re-running only does what is missing.
#   scripts/setup.sh            # deps + Release build in build/
#   ONYX_BUILD_DIR=out scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake ccache pkg-config git python3 python3-venv
  libprotobuf-dev protobuf-compiler libonnx-dev   # ONNX ModelProto types
  libdnnl-dev                                     # oneDNN: GEMM, conv, pooling, norms
  ocl-icd-opencl-dev opencl-headers               # dnnl-config.cmake find_package()s OpenCL
                                                  #   (libdnnl-dev only recommends them)
  libgtest-dev libgmock-dev libbenchmark-dev      # tests and benchmarks
  libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev  # CLI, JSON, logging
  zlib1g-dev                                      # examples read digits.csv.gz
  libplplot-dev plplot-driver-cairo               # onyx train --plot (PNG loss curve)
  python3-sklearn                                 # ships the digits data set (csv.gz)
  libopenmpi-dev openmpi-bin                      # distributed/: MPI communicator
  procps iproute2                                 # data-parallel tests: pgrep, network namespaces
  valgrind                                        # tests: the portable build under memcheck
  clang libclang-rt-dev libomp-dev llvm           # scripts/sanitize.sh, scripts/fuzz.sh: clang's
                                                  #   ASan/UBSan/TSan, libFuzzer, OpenMP, and
                                                  #   llvm-symbolizer for readable reports
  libjpeg62-turbo-dev libpng-dev libwebp-dev      # ImageDecoder codecs (each optional:
  libtiff-dev libopenjp2-7-dev                    #   a missing one is refused at run time)
  libdlpack-dev                                   # graph/dlpack.h: zero-copy tensor exchange
  python3-dev                                     # the onyx Python package (python/)
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python tools (model generators, reference outputs, the ONNX Runtime side of bench/).
VENV=${ONYX_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ] ||
   ! "$VENV/bin/python" -c "import numpy, onnx, onnxruntime, nanobind, scikit_build_core, pytest" 2>/dev/null; then
  echo "setup: creating Python environment in $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r scripts/requirements.txt
fi

# PyTorch (CPU use) from PyPI: onyx.torch, the libtorch front door (interop/, configured only
# when torch imports) and their tests need it. ONYX_NO_TORCH=1 skips it: everything else
# builds and tests without torch.
if [ "${ONYX_NO_TORCH:-0}" != 1 ]; then
  scripts/install_torch.sh "$VENV/bin/python"
fi

BUILD=${ONYX_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DONYX_PYTHON="$PWD/$VENV/bin/python" \
  ${ONYX_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
echo "setup: built onyx in $BUILD"

# The onyx Python package into the venv. Without build isolation pip reuses the venv's
# nanobind and scikit-build-core, and pyproject.toml's persistent build/pip-* folder plus
# ccache make a re-run cost seconds.
"$VENV/bin/pip" install -q --no-build-isolation .
echo "setup: installed the onyx Python package into $VENV"
