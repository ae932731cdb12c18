// Intra-op parallelism on OpenMP (the runtime oneDNN uses here), bounded by the session's
// thread count so runs never oversubscribe.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace onyx {

/// Calls fn(begin, end) over [0, n) split into contiguous chunks, on at most `threads`
/// threads. Runs inline when the work is below `grain` elements per thread.
template <typename F>
void parallel_for(int64_t n, int threads, int64_t grain, F&& fn) {
  if (n <= 0) return;
  int64_t max_chunks = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  int nt = static_cast<int>(std::min<int64_t>(std::max(1, threads), max_chunks));
  if (nt <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num();
    int T = omp_get_num_threads();
    int64_t chunk = (n + T - 1) / T;
    int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) fn(b, e);
  }
}

}  // namespace onyx
