// What the library-backed CUDA kernels (cuBLASLt matmuls, cuDNN convolutions) share: checked
// calls, handles, the TF32 switch and workspace from the run's scratch.
//
// Handles: a cuDNN handle carries a stream, and neither library allows one handle to be used by
// two threads at once, while one session serves concurrent runs on different streams. So a kernel
// leases a handle for the duration of its compute() from a per-device pool (created lazily,
// given back by the lease's destructor, never destroyed: tearing them down at process exit would
// race the CUDA driver's own teardown). A pool grows to the number of runs in flight at once.
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <cstddef>

#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {

/// onyx::Error "[cuda] <call> failed: <cuBLAS status string>" unless rc is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t rc, const char* call);
/// onyx::Error "[cuda] <call> failed: <cuDNN status string> (<cuDNN's last error message>)".
void check_cudnn(cudnnStatus_t rc, const char* call);
#define ONYX_CUBLAS_CHECK(call) ::onyx::cuda::check_cublas((call), #call)
#define ONYX_CUDNN_CHECK(call) ::onyx::cuda::check_cudnn((call), #call)

/// True when the environment variable ONYX_CUDA_TF32 is "1" (read once per process). Float32
/// matmuls and convolutions then may round their inputs to TF32 on tensor cores (about 10 bits
/// of mantissa, several times faster on A100/H100); by default they compute in full FP32
/// (CUBLAS_COMPUTE_32F, CUDNN_FMA_MATH), like the CPU provider.
bool tf32_enabled();

/// The calling thread's current CUDA device (the run's device: the executor selects it).
int current_device();

/// Exclusive use of one cuBLASLt handle of the current device until destroyed.
class CublasLtLease {
 public:
  CublasLtLease();
  ~CublasLtLease();
  CublasLtLease(const CublasLtLease&) = delete;
  CublasLtLease& operator=(const CublasLtLease&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  int device_;
  cublasLtHandle_t handle_;
};

/// Exclusive use of one cuDNN handle of the current device, set to `stream`, until destroyed.
class CudnnLease {
 public:
  explicit CudnnLease(cudaStream_t stream);
  ~CudnnLease();
  CudnnLease(const CudnnLease&) = delete;
  CudnnLease& operator=(const CudnnLease&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  int device_;
  cudnnHandle_t handle_;
};

/// `bytes` of device workspace from the run's scratch (a uint8 tensor that must outlive the
/// library call it serves); an empty tensor, with raw() null, for 0 bytes.
Tensor workspace(KernelContext& ctx, size_t bytes);

/// Largest power of two (at most 256) dividing the address: the alignment a library heuristic
/// may assume for a pointer (views of tensors start at any element).
unsigned pointer_alignment(const void* p);

}  // namespace onyx::cuda
