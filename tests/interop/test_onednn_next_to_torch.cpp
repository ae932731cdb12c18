// oneDNN in a process that loaded libtorch_cpu first (kernels/cpu/dnnl_symbols.h): libtorch's
// own oneDNN exports the call_once trampolines of the GEMM driver's one-time set-up under the
// same names as the system libdnnl's, and the linker bound libdnnl's to libtorch's; every
// GEMM-based oneDNN call then answered dnnl_unimplemented (on AVX2 hosts every float MatMul of
// the libtorch door failed: the OnnxModule tests here). This binary links libtorch before onyx,
// as a user's program would.
#include <dnnl.h>
#include <gtest/gtest.h>
#include <link.h>

#include <array>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"

namespace onyx::cpu {
namespace {

// The position of the first loaded object whose path holds `part` (-1: none).
int load_position(const std::string& part) {
  struct Find {
    std::string part;
    int at = 0, found = -1;
  } f{part};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* f = static_cast<Find*>(data);
        if (f->found < 0 && info->dlpi_name && std::string(info->dlpi_name).find(f->part) != std::string::npos)
          f->found = f->at;
        ++f->at;
        return 0;
      },
      &f);
  return f.found;
}

TEST(OneDnnNextToTorch, LibtorchIsLoadedBeforeTheSystemOneDnn) {
  // The case the repair is for; if the link order changes, these tests stop covering it.
  const int torch = load_position("libtorch_cpu"), dnnl = load_position("libdnnl");
  ASSERT_GE(torch, 0);
  ASSERT_GE(dnnl, 0);
  EXPECT_LT(torch, dnnl);
}

TEST(OneDnnNextToTorch, SgemmRunsAndIsExact) {
  active_isa();  // what every session does first; it rebinds the trampolines
  for (auto [M, N, K] : std::vector<std::array<int, 3>>{{8, 32, 16}, {64, 64, 64}, {3, 200, 129}}) {
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N), C(size_t(M) * N, -1.f);
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 7) - 3);
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 5) - 2);
    ASSERT_EQ(dnnl_sgemm('N', 'N', M, N, K, 1.f, A.data(), K, B.data(), N, 0.f, C.data(), N), dnnl_success)
        << M << "x" << N << "x" << K;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float want = 0;  // small integers: exact in float
        for (int k = 0; k < K; ++k) want += A[size_t(m) * K + k] * B[size_t(k) * N + n];
        ASSERT_EQ(C[size_t(m) * N + n], want) << m << ", " << n;
      }
  }
}

}  // namespace
}  // namespace onyx::cpu
