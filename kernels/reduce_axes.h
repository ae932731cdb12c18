// Which axes a reduction reduces and the shape it leaves (Reduce* and ArgMax/ArgMin), shared by
// every provider: the same attributes, checks and messages on the CPU and on a device.
#pragma once

#include <optional>
#include <vector>

#include "kernels/kernel.h"

namespace onyx {

struct ReduceAttrs {
  bool keepdims, noop_with_empty_axes;
  std::optional<std::vector<int64_t>> attr_axes;  // before opset 18 (canonicalize moves it)
  explicit ReduceAttrs(const KernelInfo& info);
};

struct ReducedAxes {
  std::vector<bool> reduced;  // per input axis
  Shape out;                  // the output's shape
};

/// The axes of input 1 (a 1-D int64 tensor) or the attribute; none given reduces every axis,
/// or none with noop_with_empty_axes. onyx::Error for an axis out of range or named twice.
ReducedAxes reduced_axes(const KernelContext& ctx, const ReduceAttrs& a, const Shape& x);

struct ArgReduceAttrs {
  int64_t axis;
  bool keepdims, select_last;
  explicit ArgReduceAttrs(const KernelInfo& info);
};

/// ArgMax/ArgMin's output shape; `axis` gets the normalised axis. onyx::Error for a scalar
/// input or an empty axis with elements beside it (no extreme to index).
Shape arg_reduce_shape(const KernelContext& ctx, const ArgReduceAttrs& a, const Shape& x,
                       int64_t& axis);

}  // namespace onyx
