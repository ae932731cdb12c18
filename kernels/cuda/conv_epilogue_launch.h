// Device helpers of the cuDNN convolutions (kernels/cuda/conv.cpp): the fused epilogue
// (bias, FusedConv's Z and activation in one pass) and a zero-filling window copy that pads X
// where ONNX pads are asymmetric (cuDNN's are symmetric) and crops a transposed convolution's
// full output to ONNX's pads. Plain C++17: conv_epilogue.cu implements it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::cv {

enum class DType { F32, F16, BF16, F64 };

/// com.microsoft FusedConv's `activation` with its `activation_params`: alpha for LeakyRelu,
/// (min, max) for Clip, (alpha, beta) for HardSigmoid.
struct Act {
  enum class Kind { None, Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSigmoid };
  Kind kind = Kind::None;
  float alpha = 0, beta = 0;
};

/// Over a [N, channels, inner] y of `total` elements: y = act(y + bias[c] + z), computed in
/// float (double for F64). bias ([channels]) and z (y's shape) may each be null.
void launch_conv_epilogue(void* y, const void* bias, const void* z, int64_t total, int64_t inner,
                          int64_t channels, Act act, DType dt, cudaStream_t stream);

/// Up to three spatial dims, leading ones 1 (offsets 0) for 1-D and 2-D.
struct Dims3 {
  int64_t d[3];
};

/// For each of `planes` planes: dst[p, i, j, k] = src[p, i - off0, j - off1, k - off2] where that
/// lies inside src's dims, else zero. Elements are copied as `elem_size` (2, 4 or 8) bytes.
void launch_window_copy(void* dst, const void* src, int64_t planes, Dims3 dst_dims,
                        Dims3 src_dims, Dims3 offset, int elem_size, cudaStream_t stream);

}  // namespace onyx::cuda::cv
