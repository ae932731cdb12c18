// The plain interface between kernels/cuda/normalization.cpp (attributes, shapes, outputs)
// and normalization.cu (device code) for LayerNormalization, RMSNormalization,
// SkipLayerNormalization, BatchNormalization, InstanceNormalization and GroupNormalization.
// Parameters (scale, bias, running statistics) may have another float dtype than X; they are
// read as their own dtype. All pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace onyx::cuda::norm {

enum class DType : int { F32, F64, F16, BF16 };

/// Rows of `cols` contiguous values, each normalised on its own:
///   v = x (+ skip[row % skip_rows]) (+ bias_add);  sum_out = v
///   y = (v - mean) * inv * scale (+ shift),  inv = 1 / sqrt(var + epsilon)
/// with mean and (biased) var of v over the row, or mean = 0 and var = mean(v^2) when rms.
struct RowNorm {
  const void* x = nullptr;
  void* y = nullptr;
  int64_t rows = 0, cols = 0;
  const void* skip = nullptr;  // dtype of x; optional
  int64_t skip_rows = 1;
  const void* bias_add = nullptr;  // [cols], dtype of x; optional
  void* sum_out = nullptr;         // like x; optional
  const void* scale = nullptr;     // [cols]
  const void* shift = nullptr;     // [cols]; optional
  DType scale_t = DType::F32, shift_t = DType::F32;
  void* mean_out = nullptr;        // [rows] of stat_t; optional
  void* inv_out = nullptr;         // [rows] of stat_t; optional
  DType stat_t = DType::F32;
  double epsilon = 1e-5;
  bool rms = false;
};
void launch_row_norm(DType t, const RowNorm& a, cudaStream_t stream);

/// out[i] = p[offset(i)] for i < n: a parameter broadcast to [dims] (right-aligned, stride 0
/// on broadcast axes), elements of elem_bytes (2, 4 or 8) bytes.
inline constexpr int kMaxDims = 8;
struct Expand {
  int ndims = 0;
  int64_t dims[kMaxDims] = {}, strides[kMaxDims] = {};
};
void launch_expand(const void* p, void* out, int elem_bytes, int64_t n, const Expand& e, cudaStream_t stream);

/// GroupNormalization (InstanceNormalization: groups = C) over x [N, C, S]: statistics of each
/// (n, group) block of C / groups channels, then y = (x - mean) * inv * scale[c] + bias[c], or
/// scale[g] / bias[g] when per_group.
struct GroupNorm {
  const void* x = nullptr;
  void* y = nullptr;
  int64_t N = 0, C = 0, S = 0, groups = 1;
  const void* scale = nullptr;
  const void* bias = nullptr;
  DType scale_t = DType::F32, bias_t = DType::F32;
  bool per_group = false;
  double epsilon = 1e-5;
};
size_t group_norm_scratch_bytes(DType t, const GroupNorm& a);
void launch_group_norm(DType t, const GroupNorm& a, void* scratch, cudaStream_t stream);

/// BatchNormalization over x [N, C, S]. Inference: y = (x - mean) / sqrt(var + eps) * scale +
/// bias with the given mean/var, per channel (params of C values) or per element (C * S
/// values, the old spatial=0 form; each param has C or C * S values). Training: mean/var are
/// the batch's (biased variance, per channel), and the optional outputs get
///   running_mean = mean_in * momentum + batch_mean * (1 - momentum)   (out_running_mean)
///   running_var  = var_in * momentum + batch_var * (1 - momentum)     (out_running_var)
///   batch mean / batch var                                            (out_saved_*)
/// each in the dtype of input_mean (means) or input_var (variances).
struct BatchNorm {
  const void* x = nullptr;
  void* y = nullptr;
  int64_t N = 0, C = 0, S = 0;
  const void *scale = nullptr, *bias = nullptr, *mean = nullptr, *var = nullptr;
  DType scale_t = DType::F32, bias_t = DType::F32, mean_t = DType::F32, var_t = DType::F32;
  int64_t scale_n = 0, bias_n = 0, mean_n = 0, var_n = 0;  // values in each (C or C * S)
  double epsilon = 1e-5, momentum = 0.9;
  bool training = false;
  void *out_running_mean = nullptr, *out_running_var = nullptr;
  void *out_saved_mean = nullptr, *out_saved_var = nullptr;
};
size_t batch_norm_scratch_bytes(DType t, const BatchNorm& a);
void launch_batch_norm(DType t, const BatchNorm& a, void* scratch, cudaStream_t stream);

}  // namespace onyx::cuda::norm
