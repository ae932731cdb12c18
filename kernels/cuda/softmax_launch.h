// The plain interface between kernels/cuda/softmax.cpp (attributes, the [outer, n, inner]
// split) and softmax.cu (device code) for Softmax, LogSoftmax and Hardmax.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::sm {

enum class DType : int { F32, F64, F16, BF16 };
enum class Kind : int { Softmax, LogSoftmax, Hardmax };

/// y = kind(x) along the middle axis of [outer, n, inner] (x and y device pointers of dtype t,
/// contiguous, n > 0), computed in float (double for F64).
void launch_softmax(Kind kind, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                    cudaStream_t stream);

}  // namespace onyx::cuda::sm
