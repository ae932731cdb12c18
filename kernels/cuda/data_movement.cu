// Device code of the data-movement family: a strided gather copy (Slice, Expand, Tile and
// transposes that keep the innermost axis), a shared-memory tiled batched 2-D transpose (a
// Transpose that swaps the innermost axis away), a pitched row copy (Concat, Split) and Pad.
// Elements are words of their byte width; the .cpp widens words where alignment allows.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/data_movement_launch.h"
#include "kernels/cuda/device_util.cuh"

namespace onyx::cuda::move {
namespace {

using dev::grid_for, dev::kThreads, dev::with_width;

/// U: the linear index (uint32 when it fits: i + grid stride stays below 2^32), S: the
/// signed source offset. The dimension loop is unrolled so the descriptor stays in registers.
template <typename T, typename U, typename S>
__global__ void strided_kernel(const T* src, T* dst, StridedCopy c) {
  const U n = U(c.numel), stride = U(gridDim.x) * blockDim.x;
  for (U i = U(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    U rem = i;
    S off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= c.rank) continue;
      const U dim = U(c.dims[d]), q = rem / dim;
      off += S(rem - q * dim) * S(c.strides[d]);
      rem = q;
    }
    dst[i] = src[off];
  }
}

constexpr int kTile = 32, kRows = 8;  // 32x32 tiles, 32x8 threads

/// dst[n][a][b] = src[off(n) + a + b * sb]: a tile is read along a (contiguous in src) and
/// written along b (contiguous in dst) through shared memory, padded against bank conflicts.
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, Transpose2D t) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t tiles_a = (t.A + kTile - 1) / kTile;
  for (int64_t n = blockIdx.z; n < t.batch; n += gridDim.z) {
    int64_t off = 0, rem = n;
    for (int d = t.batch_rank - 1; d >= 0; --d) {
      off += (rem % t.batch_dims[d]) * t.batch_strides[d];
      rem /= t.batch_dims[d];
    }
    const T* s = src + off;
    T* o = dst + n * t.A * t.B;
    const int64_t b0 = int64_t(blockIdx.x) * kTile;
    for (int64_t ta = blockIdx.y; ta < tiles_a; ta += gridDim.y) {
      const int64_t a0 = ta * kTile;
      __syncthreads();  // the previous tile's reads of `tile` are done
      for (int k = threadIdx.y; k < kTile; k += kRows) {
        const int64_t a = a0 + threadIdx.x, b = b0 + k;
        if (a < t.A && b < t.B) tile[k][threadIdx.x] = s[a + b * t.sb];
      }
      __syncthreads();
      for (int k = threadIdx.y; k < kTile; k += kRows) {
        const int64_t a = a0 + k, b = b0 + threadIdx.x;
        if (a < t.A && b < t.B) o[a * t.B + b] = tile[threadIdx.x][k];
      }
    }
  }
}

template <typename T, typename U>
__global__ void rows_kernel(const char* src, int64_t src_pitch, char* dst, int64_t dst_pitch,
                            U rows, U cols) {
  const U n = rows * cols, stride = U(gridDim.x) * blockDim.x;
  for (U i = U(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const U r = i / cols, c = i - r * cols;
    reinterpret_cast<T*>(dst + int64_t(r) * dst_pitch)[c] =
        reinterpret_cast<const T*>(src + int64_t(r) * src_pitch)[c];
  }
}

/// Where output index i (relative to the input's start) of an axis of size d reads from;
/// -1 for the constant. As PadKernel::source_index in kernels/cpu/tensor_ops.cpp.
__device__ __forceinline__ int64_t pad_source(int64_t i, int64_t d, PadMode mode) {
  if (i >= 0 && i < d) return i;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Edge: return i < 0 ? 0 : d - 1;
    case PadMode::Wrap: return ((i % d) + d) % d;
    case PadMode::Reflect: {
      if (d == 1) return 0;
      const int64_t p = 2 * (d - 1), m = ((i % p) + p) % p;
      return m < d ? m : p - m;
    }
  }
  return -1;
}

template <typename T>
__global__ void pad_kernel(const T* src, T* dst, PadDesc p, T value) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += stride) {
    int64_t rem = i, off = 0;
    bool fill = false;
#pragma unroll
    for (int d = kMaxPadDims - 1; d >= 0; --d) {
      if (d >= p.rank) continue;
      const int64_t o = rem % p.out_dims[d];
      rem /= p.out_dims[d];
      const int64_t k = pad_source(o - p.before[d], p.in_dims[d], p.mode);
      fill |= k < 0;
      off += k * p.in_strides[d];
    }
    dst[i] = fill ? value : src[off];
  }
}

}  // namespace

void launch_strided_copy(int elem_bytes, const void* src, void* dst, const StridedCopy& c,
                         cudaStream_t s) {
  if (c.numel <= 0) return;
  with_width(elem_bytes, [&](auto w) {
    using T = decltype(w);
    auto ps = static_cast<const T*>(src);
    auto pd = static_cast<T*>(dst);
    if (c.index32)
      strided_kernel<T, uint32_t, int32_t><<<grid_for(c.numel), kThreads, 0, s>>>(ps, pd, c);
    else
      strided_kernel<T, int64_t, int64_t><<<grid_for(c.numel), kThreads, 0, s>>>(ps, pd, c);
  });
}

void launch_transpose2d(int elem_bytes, const void* src, void* dst, const Transpose2D& t,
                        cudaStream_t s) {
  if (t.A <= 0 || t.B <= 0 || t.batch <= 0) return;
  const int64_t tiles_a = (t.A + kTile - 1) / kTile, tiles_b = (t.B + kTile - 1) / kTile;
  // x: tiles of b (up to 2^31 - 1); y and z loop past 65535.
  dim3 grid(unsigned(tiles_b), unsigned(tiles_a < 65535 ? tiles_a : 65535),
            unsigned(t.batch < 65535 ? t.batch : 65535));
  with_width(elem_bytes, [&](auto w) {
    using T = decltype(w);
    transpose_kernel<T><<<grid, dim3(kTile, kRows), 0, s>>>(static_cast<const T*>(src),
                                                            static_cast<T*>(dst), t);
  });
}

void launch_copy_rows(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch,
                      int64_t rows, int64_t row_bytes, cudaStream_t s) {
  if (rows <= 0 || row_bytes <= 0) return;
  if (rows == 1 || (src_pitch == row_bytes && dst_pitch == row_bytes)) {
    cudaMemcpyAsync(dst, src, size_t(rows * row_bytes), cudaMemcpyDeviceToDevice, s);
    return;
  }
  // The widest word dividing both pointers, both pitches and the row.
  const uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(src)) | reinterpret_cast<uintptr_t>(dst) |
                        uint64_t(src_pitch) | uint64_t(dst_pitch) | uint64_t(row_bytes);
  int w = 16;
  while (w > 1 && (bits & uint64_t(w - 1))) w /= 2;
  const int64_t cols = row_bytes / w, n = rows * cols;
  with_width(w, [&](auto word) {
    using T = decltype(word);
    auto ps = static_cast<const char*>(src);
    auto pd = static_cast<char*>(dst);
    if (n <= INT32_MAX)
      rows_kernel<T, uint32_t><<<grid_for(n), kThreads, 0, s>>>(ps, src_pitch, pd, dst_pitch,
                                                                uint32_t(rows), uint32_t(cols));
    else
      rows_kernel<T, int64_t><<<grid_for(n), kThreads, 0, s>>>(ps, src_pitch, pd, dst_pitch, rows,
                                                               cols);
  });
}

void launch_pad(int elem_bytes, const void* src, void* dst, const PadDesc& p, const void* value,
                cudaStream_t s) {
  if (p.numel <= 0) return;
  with_width(elem_bytes, [&](auto w) {
    using T = decltype(w);
    T v;
    __builtin_memcpy(&v, value, sizeof(T));
    pad_kernel<T><<<grid_for(p.numel), kThreads, 0, s>>>(static_cast<const T*>(src),
                                                         static_cast<T*>(dst), p, v);
  });
}

}  // namespace onyx::cuda::move
