// LayerNormalization / RMSNormalization attributes and their axis, shared by every provider.
#pragma once

#include <algorithm>

#include "kernels/kernel.h"

namespace onyx {

struct RowNormAttrs {
  int64_t axis;
  double epsilon;
  DataType stash;  // stash_type: the statistics' dtype
  bool rms;        // RMSNormalization: no mean, no bias
  RowNormAttrs(const KernelInfo& info, bool rms_norm)
      : axis(info.node.attr_int("axis", -1)),
        epsilon(info.node.attr_float("epsilon", 1e-5f)),
        stash(static_cast<DataType>(info.node.attr_int("stash_type", 1))),
        rms(rms_norm) {}

  /// The first normalised axis of X (rows are X.shape[axis:]); onyx::Error when out of range.
  int64_t axis_of(const KernelContext& ctx, const Tensor& X) const {
    const int64_t r = X.rank(), a = axis < 0 ? axis + r : axis;
    ONYX_CHECK(a >= 0 && a < std::max<int64_t>(r, 1),
               "[{}] axis {} is out of range for X of shape {}", ctx.label(), axis,
               shape_str(X.shape()));
    return a;
  }
};

}  // namespace onyx
