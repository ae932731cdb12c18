#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs the whole test suite: unit tests,
# real-model tests, the ONNX conformance gate (tests/conformance/expected_failures.txt) and
# valgrind; on an AVX-512 host, everything again with ONYX_ISA=avx2.
set -euo pipefail
cd "$(dirname "$0")/.."
export ONYX_CMAKE_ARGS="-DONYX_WERROR=ON ${ONYX_CMAKE_ARGS:-}"
scripts/setup.sh
BUILD=${ONYX_BUILD_DIR:-build}
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)"
# Again with the kernels and oneDNN held to AVX2, as on an AVX2-only host, where this CPU has
# more (the default build dispatches by CPUID; kernels/cpu/isa.h). valgrind already runs the
# AVX2 code (its CPUID has no AVX-512).
if grep -qw avx512f /proc/cpuinfo; then
  echo "test: the suite again with ONYX_ISA=avx2"
  # Not the interop label: its processes load libtorch_cpu, whose bundled oneDNN exports the
  # same dnnl symbols as ours, so ONYX_ISA's dnnl::set_max_cpu_isa cap lands in the wrong copy
  # and oneDNN refuses our primitives (known limit of ONYX_ISA with libtorch in-process).
  ONYX_ISA=avx2 ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -LE 'valgrind|interop'
fi
