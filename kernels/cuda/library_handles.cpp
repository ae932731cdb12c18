// Handle pools, checked library calls and the TF32 switch (see library_handles.h).
#include "kernels/cuda/library_handles.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace onyx::cuda {
namespace {

/// Free handles per device. Leaked on purpose (see library_handles.h).
template <typename H>
struct HandlePool {
  std::mutex mu;
  std::map<int, std::vector<H>> free;

  H take(int device, H (*create)()) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto& v = free[device];
      if (!v.empty()) {
        H h = v.back();
        v.pop_back();
        return h;
      }
    }
    return create();
  }
  void give_back(int device, H h) {
    std::lock_guard<std::mutex> lock(mu);
    free[device].push_back(h);
  }
};

template <typename H>
HandlePool<H>& pool() {
  static auto* p = new HandlePool<H>();
  return *p;
}

// cuDNN asks that handles be created one at a time (concurrent first creations race inside
// the library's lazy initialisation); creation is rare, so cuBLASLt shares the lock.
std::mutex& create_mutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

cublasLtHandle_t create_cublaslt() {
  std::lock_guard<std::mutex> lock(create_mutex());
  cublasLtHandle_t h = nullptr;
  ONYX_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

cudnnHandle_t create_cudnn() {
  std::lock_guard<std::mutex> lock(create_mutex());
  cudnnHandle_t h = nullptr;
  ONYX_CUDNN_CHECK(cudnnCreate(&h));
  return h;
}

}  // namespace

void check_cublas(cublasStatus_t rc, const char* call) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    ONYX_THROW("[cuda] {} failed: {}", call, cublasLtGetStatusString(rc));
}

void check_cudnn(cudnnStatus_t rc, const char* call) {
  if (rc == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0')
    ONYX_THROW("[cuda] {} failed: {} ({})", call, cudnnGetErrorString(rc), detail);
  ONYX_THROW("[cuda] {} failed: {}", call, cudnnGetErrorString(rc));
}

bool tf32_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ONYX_CUDA_TF32");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

int current_device() {
  int d = 0;
  ONYX_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

CublasLtLease::CublasLtLease()
    : device_(current_device()), handle_(pool<cublasLtHandle_t>().take(device_, create_cublaslt)) {}

CublasLtLease::~CublasLtLease() { pool<cublasLtHandle_t>().give_back(device_, handle_); }

CudnnLease::CudnnLease(cudaStream_t stream)
    : device_(current_device()), handle_(pool<cudnnHandle_t>().take(device_, create_cudnn)) {
  cudnnStatus_t rc = cudnnSetStream(handle_, stream);
  if (rc != CUDNN_STATUS_SUCCESS) {
    pool<cudnnHandle_t>().give_back(device_, handle_);
    check_cudnn(rc, "cudnnSetStream(handle, stream)");
  }
}

CudnnLease::~CudnnLease() { pool<cudnnHandle_t>().give_back(device_, handle_); }

Tensor workspace(KernelContext& ctx, size_t bytes) {
  if (bytes == 0) return Tensor();
  return ctx.scratch(DataType::UInt8, {static_cast<int64_t>(bytes)});
}

unsigned pointer_alignment(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  unsigned align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

}  // namespace onyx::cuda
