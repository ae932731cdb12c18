#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/fill_launch.h"

namespace onyx::cuda::fill {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? b : 65535 * 16);  // grid-stride beyond that
}

template <typename W>
__global__ void fill_kernel(W* out, int64_t n, W value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <typename W>
__global__ void trilu_kernel(const W* x, W* y, int64_t total, int64_t n_rows, int64_t m_cols, int64_t k,
                             bool upper) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % m_cols, i = (e / m_cols) % n_rows;
    const bool keep = upper ? j >= i + k : j <= i + k;
    y[e] = keep ? x[e] : W(0);
  }
}

template <typename W>
void fill_as(void* out, int64_t n, uint64_t pattern, cudaStream_t s) {
  fill_kernel<W><<<blocks_for(n), kThreads, 0, s>>>(static_cast<W*>(out), n, static_cast<W>(pattern));
}

template <typename W>
void trilu_as(const void* x, void* y, int64_t total, int64_t n, int64_t m, int64_t k, bool upper, cudaStream_t s) {
  trilu_kernel<W><<<blocks_for(total), kThreads, 0, s>>>(static_cast<const W*>(x), static_cast<W*>(y), total, n, m,
                                                         k, upper);
}

}  // namespace

void launch_fill(void* out, int64_t n, int width, uint64_t pattern, cudaStream_t stream) {
  if (n <= 0) return;
  switch (width) {
    case 1: return fill_as<uint8_t>(out, n, pattern, stream);
    case 2: return fill_as<uint16_t>(out, n, pattern, stream);
    case 4: return fill_as<uint32_t>(out, n, pattern, stream);
    default: return fill_as<uint64_t>(out, n, pattern, stream);
  }
}

void launch_trilu(const void* x, void* y, int64_t rows, int64_t n_rows, int64_t m_cols, int64_t k, bool upper,
                  int width, cudaStream_t stream) {
  const int64_t total = rows * m_cols;
  if (total <= 0) return;
  switch (width) {
    case 1: return trilu_as<uint8_t>(x, y, total, n_rows, m_cols, k, upper, stream);
    case 2: return trilu_as<uint16_t>(x, y, total, n_rows, m_cols, k, upper, stream);
    case 4: return trilu_as<uint32_t>(x, y, total, n_rows, m_cols, k, upper, stream);
    default: return trilu_as<uint64_t>(x, y, total, n_rows, m_cols, k, upper, stream);
  }
}

}  // namespace onyx::cuda::fill
