// The plain interface between kernels/cuda/data_movement.cpp and data_movement.cu: the
// copies behind Transpose, Concat, Split, Slice, Pad, Expand and Tile. Elements are moved by
// width (1, 2, 4, 8 or 16 bytes), never interpreted, so every non-string dtype is served.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::move {

/// Most dimensions of a copy once neighbouring dimensions are merged (Tile views its output
/// as (repeat, dim) pairs, so 16 covers rank 8).
inline constexpr int kMaxDims = 16;

/// dst (contiguous, row-major over dims) = src read at sum(index[d] * strides[d]) elements
/// from `src`: strides may be 0 (broadcast) or negative (a reversed Slice).
struct StridedCopy {
  int rank = 0;
  int64_t numel = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  bool index32 = false;  // every index and offset fits in 32 bits (set by the .cpp)
};
void launch_strided_copy(int elem_bytes, const void* src, void* dst, const StridedCopy& c,
                         cudaStream_t s);

/// Batched 2-D transpose through shared-memory tiles: dst[n][a][b] = src[off(n) + a + b * sb]
/// for n over the batch (off from batch_dims / batch_strides), a < A, b < B.
struct Transpose2D {
  int batch_rank = 0;
  int64_t batch = 1;
  int64_t batch_dims[kMaxDims] = {};
  int64_t batch_strides[kMaxDims] = {};
  int64_t A = 0, B = 0, sb = 0;
};
void launch_transpose2d(int elem_bytes, const void* src, void* dst, const Transpose2D& t,
                        cudaStream_t s);

/// `rows` rows of `row_bytes` bytes from src (rows src_pitch bytes apart) to dst (dst_pitch
/// apart): Concat's and Split's slabs.
void launch_copy_rows(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch,
                      int64_t rows, int64_t row_bytes, cudaStream_t s);

enum class PadMode : int { Constant, Reflect, Edge, Wrap };
inline constexpr int kMaxPadDims = 8;

/// dst[o] for o over out_dims reads src at in index o[d] - before[d] on each axis, mapped by
/// `mode` when outside [0, in_dims[d]) (constant: the value instead).
struct PadDesc {
  int rank = 0;
  int64_t numel = 0;
  int64_t out_dims[kMaxPadDims] = {};
  int64_t in_dims[kMaxPadDims] = {};
  int64_t in_strides[kMaxPadDims] = {};
  int64_t before[kMaxPadDims] = {};
  PadMode mode = PadMode::Constant;
};
/// `value` points to one host element of elem_bytes bytes (constant mode's fill).
void launch_pad(int elem_bytes, const void* src, void* dst, const PadDesc& p, const void* value,
                cudaStream_t s);

}  // namespace onyx::cuda::move
