// Device side of the pooling kernels (kernels/cuda/pool.cpp). Plain C++17: pool.cu implements it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::pooling {

enum class DType { F32, F16, BF16, F64, I8, U8 };
enum class Kind { Max, Avg, Lp };

/// A pooling window over up to three spatial dims; 1-D and 2-D are padded in front (sizes,
/// kernel, strides and dilations 1, pads 0).
struct Window {
  int64_t in[3], out[3], k[3], stride[3], dil[3], pad_l[3], pad_r[3];
};

/// y[plane, o] for each of `planes` [N * C] planes, following the ONNX reference as the CPU
/// kernel does: a tap counts when inside the input (with count_include_pad also inside the
/// pads); max takes the first maximum in (d, h, w) tap order, the type's lowest value (index -1)
/// for a window over padding only; avg divides by the count (0 when it is 0); Lp is
/// (sum |x|^p)^(1/p). `indices` (Max only, may be null) gets ONNX's flattened index into X,
/// column-major within the plane when `column_major` (storage_order 1).
void launch_pool(const void* x, void* y, int64_t* indices, int64_t planes, const Window& w,
                 Kind kind, bool count_include_pad, bool column_major, double p, DType dt,
                 cudaStream_t stream);

/// y[plane] = max or mean of x[plane, 0..size) over `planes` planes (GlobalMaxPool,
/// GlobalAveragePool); NaN is skipped by the max, as std::max skips it on the CPU.
void launch_global_pool(const void* x, void* y, int64_t planes, int64_t size, bool max, DType dt,
                        cudaStream_t stream);

}  // namespace onyx::cuda::pooling
