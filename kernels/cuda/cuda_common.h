// What every CUDA kernel file shares (host side, compiled by the C++ compiler): the checking
// wrapper for CUDA runtime calls, the run's stream, and the registration entry points of
// each kernel family. Device code lives in *.cu files behind plain launch functions
// (kernels/cuda/launch.h), so kernel classes stay ordinary C++.
#pragma once

#include <cuda_runtime_api.h>

#include "graph/error.h"
#include "kernels/kernel.h"

namespace onyx::cuda {

/// onyx::Error "[cuda] <call> failed: <CUDA's error string>" when rc is not cudaSuccess.
inline void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) ONYX_THROW("[cuda] {} failed: {}", call, cudaGetErrorString(rc));
}
#define ONYX_CUDA_CHECK(call) ::onyx::cuda::check((call), #call)

/// The stream this run's kernels on the CUDA provider queue on.
inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

/// The provider's registry name.
inline constexpr const char* kProvider = "cuda";

// One registration function per kernel family (kernels/cuda/<family>.cpp).
void register_memcpy_kernels(KernelRegistry& r);
void register_elementwise_kernels(KernelRegistry& r);
void register_cast_kernels(KernelRegistry& r);
void register_data_movement_kernels(KernelRegistry& r);
void register_gather_scatter_kernels(KernelRegistry& r);
void register_all_cuda_kernels(KernelRegistry& r);

}  // namespace onyx::cuda
