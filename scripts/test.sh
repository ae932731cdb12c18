#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs the whole test suite: unit tests,
# real-model tests and the ONNX conformance gate (tests/conformance/expected_failures.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
export ONYX_CMAKE_ARGS="-DONYX_WERROR=ON ${ONYX_CMAKE_ARGS:-}"
scripts/setup.sh
BUILD=${ONYX_BUILD_DIR:-build}
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
