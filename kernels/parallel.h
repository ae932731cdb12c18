// Intra-op parallelism on OpenMP (the runtime oneDNN uses here), bounded by the session's
// thread count so runs never oversubscribe.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

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
  // An exception may not leave an OpenMP region (the runtime calls std::terminate), so a
  // kernel's onyx::Error thrown on a worker would end the process: the first one is kept
  // and rethrown here, after every thread has finished its chunk.
  std::exception_ptr error;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num();
    int T = omp_get_num_threads();
    int64_t chunk = (n + T - 1) / T;
    int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
#pragma omp critical(onyx_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace onyx
