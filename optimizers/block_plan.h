// How fused optimizer passes split the parameter segments into work: segments are cut into
// pieces packed into fixed-size blocks, and blocks run in parallel. The cut depends only on the
// segments, never on the thread count, so per-piece partial sums (LAMB norms) reduce in the
// same order and results are identical for any number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/parallel.h"
#include "optimizers/optimizer.h"

namespace onyx::optim {

/// A contiguous run of one segment's elements, [begin, end) in the flat buffer.
struct Piece {
  int segment = 0;  // index into the segments given to BlockPlan
  int64_t begin = 0, end = 0;
};

class BlockPlan {
 public:
  /// Checks segments (onyx::Error "[optimizer] ..." on negative offset or size, or overlap)
  /// and packs them into blocks of at most `block_elems` elements.
  explicit BlockPlan(const std::vector<ParamSegment>& segments, int64_t block_elems = 16384);

  /// One past the last element any segment covers: the length buffers must have.
  int64_t span() const { return span_; }
  const std::vector<Piece>& pieces() const { return pieces_; }

  /// Calls fn(piece, piece_index) for every piece, blocks spread over `threads` threads.
  template <typename F>
  void for_each_piece(int threads, F&& fn) const {
    const int64_t blocks = static_cast<int64_t>(block_start_.size()) - 1;
    parallel_for(blocks, threads, 2, [&](int64_t b, int64_t e) {
      for (int64_t p = block_start_[b]; p < block_start_[e]; ++p) fn(pieces_[p], p);
    });
  }

 private:
  int64_t span_ = 0;
  std::vector<Piece> pieces_;
  std::vector<int64_t> block_start_;  // pieces of block b: [block_start_[b], block_start_[b+1])
};

}  // namespace onyx::optim
