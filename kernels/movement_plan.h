// The host-side arithmetic of the data-movement ops (Transpose, Expand, Tile, Concat, Split,
// Pad), shared by every provider: attributes and shape-like inputs checked against the data's
// shape, output shapes computed, onyx::Error naming the node otherwise. The kernels then only
// move bytes (Slice's part is kernels/slice_plan.h).
#pragma once

#include <vector>

#include "kernels/kernel.h"

namespace onyx {

/// Transpose's permutation: `perm_attr`, or the axes reversed when the node has no perm
/// (`reverse`), normalised and checked against `x`; sets `out` to the permuted shape.
std::vector<int64_t> transpose_perm(const std::string& label, const std::vector<int64_t>& perm_attr,
                                    bool reverse, const Shape& x, Shape& out);

/// Expand of x to the shape input (input 1): the broadcast output shape and, per output axis,
/// x's element stride (0 where x is broadcast).
struct ExpandPlan {
  Shape out;
  std::vector<int64_t> strides;
};
ExpandPlan plan_expand(const KernelContext& ctx, const Shape& x);

/// Tile's repeats (input 1), checked against x's rank and non-negative; sets `out`.
std::vector<int64_t> tile_repeats(const KernelContext& ctx, const Shape& x, Shape& out);

/// Concat's axis attribute (required since opset 4, 1 by default before).
int64_t concat_axis_attr(const KernelInfo& info);

/// Concat over every input (same dtype and rank, equal but for the axis): the output shape,
/// the normalised axis and the rows (outer) and row length per unit of the axis (inner).
struct ConcatPlan {
  Shape out;
  size_t axis = 0;
  int64_t outer = 1, inner = 1;
};
ConcatPlan plan_concat(const KernelContext& ctx, int64_t axis_attr);

/// Split's attributes: axis, num_outputs, and whether the last part may be smaller (opset 18).
struct SplitAttrs {
  int64_t axis, num_outputs;
  bool uneven;
  explicit SplitAttrs(const KernelInfo& info);
};

/// One run's parts: their sizes along the normalised axis (input 1 when given, else equal
/// parts over the node's outputs), and x's rows (outer) and row length per unit (inner).
struct SplitPlan {
  size_t axis = 0;
  std::vector<int64_t> sizes;
  int64_t outer = 1, inner = 1;
};
SplitPlan plan_split(const KernelContext& ctx, const SplitAttrs& a, const Shape& x);

/// Pad's mode attribute; wrap from opset 19.
enum class PadMode { Constant, Reflect, Edge, Wrap };
PadMode parse_pad_mode(const KernelInfo& info);

/// Pad's per-axis amounts (inputs 1 and 3; negative amounts crop) and the output shape.
/// `constant_mode` false refuses padding an empty axis (reflect, edge and wrap read from it).
struct PadPlan {
  Shape out;
  std::vector<int64_t> before, after;
};
PadPlan plan_pad(const KernelContext& ctx, const Shape& x, bool constant_mode);

}  // namespace onyx
