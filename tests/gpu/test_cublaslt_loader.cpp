// cuBLASLt opens on first use (kernels/cuda/cublaslt_loader.cpp): a process that never runs a
// CUDA matmul does not map the 540 MB library at all, and the first call reaches the real one.
// Runs without a GPU: only loading and status strings are checked; the matmuls themselves are
// onyx_cuda_kernel_tests' (on a device).
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(library) != std::string::npos) return true;
  return false;
}

TEST(CublasLtLoader, OpensOnFirstUseOnly) {
  EXPECT_FALSE(mapped("libcublasLt")) << "libcublasLt is mapped before any cuBLASLt call: "
                                         "something links it again";
  const char* s = cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(std::strstr(s, "could not be loaded"), nullptr) << s;
  EXPECT_GT(std::strlen(s), 0u);
  EXPECT_TRUE(mapped("libcublasLt")) << "the first call did not open libcublasLt";
  // The success status reads differently from a failure (the real table, not one message).
  EXPECT_STRNE(cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS), s);
}

TEST(CublasLtLoader, CreateAnswersWithOrWithoutADevice) {
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t rc = cublasLtCreate(&h);
  // On a GPU machine a handle; without one, cuBLASLt's own error, never the loader's.
  if (rc == CUBLAS_STATUS_SUCCESS) {
    EXPECT_NE(h, nullptr);
  } else {
    EXPECT_EQ(std::strstr(cublasLtGetStatusString(rc), "could not be loaded"), nullptr)
        << cublasLtGetStatusString(rc);
  }
}

}  // namespace
