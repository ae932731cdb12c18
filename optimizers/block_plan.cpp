#include "optimizers/block_plan.h"

#include <algorithm>
#include <numeric>

#include "graph/error.h"

namespace onyx::optim {

BlockPlan::BlockPlan(const std::vector<ParamSegment>& segments, int64_t block_elems)
    : segments_(static_cast<int64_t>(segments.size())) {
  ONYX_CHECK(block_elems > 0, "[optimizer] block size should be positive but is {}", block_elems);
  for (const ParamSegment& s : segments)
    ONYX_CHECK(s.offset >= 0 && s.size >= 0,
               "[optimizer] segment '{}' should have offset >= 0 and size >= 0 but has offset {} "
               "and size {}",
               s.name, s.offset, s.size);
  for (const ParamSegment& s : segments) low_copy_.push_back(s.low_precision_copy ? 1 : 0);
  std::vector<int> order(segments.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return segments[a].offset < segments[b].offset; });

  block_start_.push_back(0);
  int64_t fill = 0;
  const ParamSegment* prev = nullptr;
  for (int i : order) {
    const ParamSegment& s = segments[i];
    if (s.size == 0) continue;
    ONYX_CHECK(!prev || s.offset >= prev->offset + prev->size,
               "[optimizer] segment '{}' [{}, {}) overlaps segment '{}' [{}, {})", s.name, s.offset,
               s.offset + s.size, prev->name, prev->offset, prev->offset + prev->size);
    prev = &s;
    span_ = std::max(span_, s.offset + s.size);
    for (int64_t pos = s.offset, end = s.offset + s.size; pos < end;) {
      const int64_t take = std::min(end - pos, block_elems - fill);
      pieces_.push_back({i, pos, pos + take});
      pos += take;
      fill += take;
      if (fill == block_elems) {
        block_start_.push_back(static_cast<int64_t>(pieces_.size()));
        fill = 0;
      }
    }
  }
  if (fill > 0) block_start_.push_back(static_cast<int64_t>(pieces_.size()));
}

}  // namespace onyx::optim
