// How fused optimizer passes split the parameter segments into work: segments are cut into
// pieces packed into fixed-size blocks, and the optimizer kernels run blocks in parallel. The
// cut depends only on the segments, never on the thread count, so per-piece partial sums (LAMB
// norms) reduce in the same order and results are identical for any number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/optimizer_kernels.h"
#include "optimizers/optimizer.h"

namespace onyx::optim {

/// A contiguous run of one segment's elements, [begin, end) in the flat buffer; `segment`
/// indexes the segments given to BlockPlan.
using Piece = optimizer_kernels::Piece;

class BlockPlan {
 public:
  /// Checks segments (onyx::Error "[optimizer] ..." on negative offset or size, or overlap)
  /// and packs them into blocks of at most `block_elems` elements.
  explicit BlockPlan(const std::vector<ParamSegment>& segments, int64_t block_elems = 16384);

  /// One past the last element any segment covers: the length buffers must have.
  int64_t span() const { return span_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  /// The plan as the optimizer kernels take it (a view: valid while this plan lives).
  optimizer_kernels::PiecePlan view() const {
    return {pieces_, block_start_, span_, segments_, low_copy_};
  }

 private:
  int64_t span_ = 0;
  int64_t segments_ = 0;
  std::vector<Piece> pieces_;
  std::vector<int64_t> block_start_;  // pieces of block b: [block_start_[b], block_start_[b+1])
  std::vector<uint8_t> low_copy_;     // per segment: ParamSegment::low_precision_copy
};

}  // namespace onyx::optim
