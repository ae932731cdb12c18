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

/// Bytes per element of a tensor bound for the device (strings never are).
inline int elem_bytes(const KernelContext& ctx, DataType t) {
  ONYX_CHECK(t != DataType::String, "[{}] string tensors cannot be on a CUDA device", ctx.label());
  return int(dtype_size(t));
}

/// The provider's registry name.
inline constexpr const char* kProvider = "cuda";

// One registration function per kernel family (kernels/cuda/<family>.cpp).
/// all_types() without strings, plus complex: what the data-movement and gather/scatter ops
/// move since opset 13 (data_movement.cpp).
std::vector<DataType> device_movable_types();

void register_memcpy_kernels(KernelRegistry& r);
void register_reduce_kernels(KernelRegistry& r);         // reduce.cpp
void register_softmax_kernels(KernelRegistry& r);        // softmax.cpp
void register_normalization_kernels(KernelRegistry& r);  // normalization.cpp
void register_attention_kernels(KernelRegistry& r);      // attention.cpp
void register_matmul_kernels(KernelRegistry& r);         // matmul.cpp
void register_conv_kernels(KernelRegistry& r);           // conv.cpp
void register_pool_kernels(KernelRegistry& r);           // pool.cpp
void register_elementwise_kernels(KernelRegistry& r);    // elementwise.cpp
void register_cast_kernels(KernelRegistry& r);           // cast.cpp
void register_data_movement_kernels(KernelRegistry& r);  // data_movement.cpp
void register_gather_scatter_kernels(KernelRegistry& r); // gather_scatter.cpp
void register_fill_kernels(KernelRegistry& r);           // fill.cpp
void register_all_cuda_kernels(KernelRegistry& r);

}  // namespace onyx::cuda
