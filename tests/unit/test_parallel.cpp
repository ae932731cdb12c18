// kernels/parallel.h: parallel_for's chunking and its exception handling.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "graph/error.h"
#include "kernels/parallel.h"

namespace onyx {
namespace {

TEST(ParallelFor, CoversTheRangeOnceInContiguousChunks) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(1000, 4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// Found by tests/fuzz/fuzz_model.cpp (RoiAlign with a 1e30-pixel ROI): an exception thrown in
// a chunk escaped the OpenMP region, and the runtime ended the process with std::terminate. It
// reaches the caller, after the other chunks finished, and the next call works.
TEST(ParallelFor, AnErrorInOneChunkReachesTheCaller) {
  for (int threads : {1, 2, 4}) {
    SCOPED_TRACE(threads);
    std::atomic<int64_t> done{0};
    try {
      parallel_for(1000, threads, 1, [&](int64_t b, int64_t e) {
        if (b == 0) throw Error("[test] chunk 0 failed");
        done += e - b;
      });
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "[test] chunk 0 failed");
    }
    int64_t sum = 0;
    parallel_for(10, threads, 1, [&](int64_t b, int64_t e) {
#pragma omp atomic
      sum += e - b;
    });
    EXPECT_EQ(sum, 10);
  }
}

}  // namespace
}  // namespace onyx
