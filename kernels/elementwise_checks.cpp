// Elementwise attribute and operand checks for every provider (kernels/elementwise_checks.h).
#include "kernels/elementwise_checks.h"

#include <string>

namespace onyx {

LegacyBroadcast::LegacyBroadcast(const KernelInfo& info)
    : on_(info.opset < 7 && info.node.attr_int("broadcast", 0) != 0 && info.node.has_attr("axis")),
      axis_(info.node.attr_int("axis", 0)) {}

Tensor LegacyBroadcast::apply(const KernelContext& ctx, const Tensor& a, const Tensor& b) const {
  if (!on_) return b;
  int64_t axis = axis_ < 0 ? axis_ + a.rank() : axis_;
  ONYX_CHECK(axis >= 0 && axis + b.rank() <= a.rank(),
             "[{}] legacy broadcast axis {} does not fit B of shape {} into A of shape {}",
             ctx.label(), axis_, shape_str(b.shape()), shape_str(a.shape()));
  Shape s = b.shape();
  s.resize(size_t(a.rank() - axis), 1);
  return b.reshape(s);
}

bool parse_shift_left(const KernelInfo& info) {
  std::string d = info.node.require_attr("direction", Attribute::Type::String).s;
  ONYX_CHECK(d == "LEFT" || d == "RIGHT",
             "[{}] attribute direction must be 'LEFT' or 'RIGHT', found '{}'", info.label(), d);
  return d == "LEFT";
}

void check_clip_bounds(const KernelContext& ctx, const Tensor& x, const Tensor* lo,
                       const Tensor* hi) {
  for (const Tensor* b : {lo, hi}) {
    if (!b) continue;
    ONYX_CHECK(b->dtype() == x.dtype(), "[{}] min/max must have the input's dtype {}, found {}",
               ctx.label(), dtype_name(x.dtype()), dtype_name(b->dtype()));
    ONYX_CHECK(b->numel() == 1, "[{}] min/max must be scalars, found shape {}", ctx.label(),
               shape_str(b->shape()));
  }
}

void check_fast_gelu_bias(const KernelContext& ctx, const Tensor& x, const Tensor& bias) {
  ONYX_CHECK(bias.dtype() == x.dtype() && bias.rank() == 1 && x.rank() >= 1 &&
                 x.dim(-1) == bias.numel(),
             "[{}] bias must be {} [{}] (X's last dim), found {} {}", ctx.label(),
             dtype_name(x.dtype()), x.rank() >= 1 ? x.dim(-1) : 0, dtype_name(bias.dtype()),
             shape_str(bias.shape()));
}

}  // namespace onyx
