// Launchers of kernels/cuda/fill.cu: byte-pattern fills and triangle masks. Elements are
// moved as opaque 1/2/4/8-byte words: zero bits are zero in every numeric type and bool.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::fill {

/// out[0 .. n) = the low `width` bytes of `pattern` (width 1, 2, 4 or 8).
void launch_fill(void* out, int64_t n, int width, uint64_t pattern, cudaStream_t stream);
/// Trilu over `rows` rows of M elements, row r being row (r % N) of its matrix: keeps the
/// columns j >= i + k (upper) or j <= i + k (lower), zeroes the others.
void launch_trilu(const void* x, void* y, int64_t rows, int64_t n_rows, int64_t m_cols, int64_t k,
                  bool upper, int width, cudaStream_t stream);

}  // namespace onyx::cuda::fill
