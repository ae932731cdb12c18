// Slice's arithmetic, shared by every provider: starts/ends/axes/steps (inputs 1-4, read on
// the host) resolved against the data's shape into the output shape, the first element taken
// and the element stride along each axis; the kernels then do one strided copy.
#pragma once

#include <vector>

#include "kernels/kernel.h"

namespace onyx {

struct SlicePlan {
  Shape shape;                   // the output's
  int64_t base = 0;              // element offset of the first element taken
  std::vector<int64_t> strides;  // per output axis, in input elements (0 where one is taken)
};

/// onyx::Error naming the node for mismatched lengths, repeated axes or a zero step.
SlicePlan plan_slice(const KernelContext& ctx, const Shape& x_shape);

}  // namespace onyx
