// The one checking wrapper for CUDA runtime and NCCL calls: a failure throws onyx::Error
// "[nccl] <call> failed: <the library's error string>".
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "graph/error.h"

namespace onyx::dist {

inline void cuda_check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) ONYX_THROW("[nccl] {} failed: {}", call, cudaGetErrorString(rc));
}

inline void nccl_check(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess && rc != ncclInProgress) {
    ONYX_THROW("[nccl] {} failed: {}", call, ncclGetErrorString(rc));
  }
}

}  // namespace onyx::dist
