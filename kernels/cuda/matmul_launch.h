// Device helpers of the cuBLASLt matmul kernels (kernels/cuda/matmul.cpp): the epilogues
// cuBLASLt does not run for us (erf GELU, double, fallbacks) and Gemm's broadcast C.
// Plain C++17 interface: matmul.cu (nvcc) implements it, matmul.cpp (C++20) calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::mm {

enum class DType { F32, F16, BF16, F64 };

/// What ai.onyx FusedMatMulBias applies after the bias (its `activation` attribute).
enum class Act { None, Relu, Gelu, GeluTanh };

/// y[i, j] = act(y[i, j] + bias[j]) over `rows` rows of `n` (row-major), computed in float
/// (double for F64). `bias` may be null: the activation alone.
void launch_bias_act(void* y, const void* bias, int64_t rows, int64_t n, Act act, DType dt,
                     cudaStream_t stream);

/// y[i, j] = scale * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] over an m x n y: Gemm's C
/// broadcast to [M, N] (cm is 1 or m, cn is 1 or n).
void launch_broadcast_c(void* y, const void* c, int64_t m, int64_t n, int64_t cm, int64_t cn,
                        double scale, DType dt, cudaStream_t stream);

}  // namespace onyx::cuda::mm
