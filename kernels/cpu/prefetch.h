// Asking for cache lines ahead of a kernel's loads. Why: the backward kernels read activations
// the forward wrote long before, and where each element costs many instructions (double-precision
// norms, erf/exp) the out-of-order window does not reach the next rows or planes in time for the
// hardware prefetchers on our VMs (simd_body.inc's with_prefetch does the same inside its maps).
#pragma once

#include <cstdint>

namespace onyx::cpu {

/// Asks for the cache lines of p[0, n).
template <typename T>
inline void prefetch_lines(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64 / static_cast<int64_t>(sizeof(T))) __builtin_prefetch(p + i);
}

}  // namespace onyx::cpu
