// Shape arithmetic of the data-movement ops (kernels/movement_plan.h), one copy for every
// provider; the messages are the ones the CPU kernels always gave.
#include "kernels/movement_plan.h"

#include <algorithm>

#include "kernels/shape_util.h"

namespace onyx {

std::vector<int64_t> transpose_perm(const std::string& label, const std::vector<int64_t>& perm_attr,
                                    bool reverse, const Shape& x, Shape& out) {
  const size_t r = x.size();
  std::vector<int64_t> perm = perm_attr;
  if (reverse)
    for (size_t i = r; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  ONYX_CHECK(perm.size() == r, "[{}] attribute 'perm' {} does not match input shape {}", label,
             perm, shape_str(x));
  std::vector<bool> seen(r, false);
  out.clear();
  for (int64_t& p : perm) {
    p = normalize_axis(p, static_cast<int64_t>(r), label + " attribute 'perm'");
    ONYX_CHECK(!seen[static_cast<size_t>(p)], "[{}] attribute 'perm' {} repeats an axis", label,
               perm_attr);
    seen[static_cast<size_t>(p)] = true;
    out.push_back(x[static_cast<size_t>(p)]);
  }
  return perm;
}

ExpandPlan plan_expand(const KernelContext& ctx, const Shape& x) {
  const Tensor& s = ctx.required_input(1);
  ONYX_CHECK(s.rank() == 1, "[{}] shape input should be 1-D but has shape {}", ctx.label(),
             shape_str(s.shape()));
  Shape want = s.to_int64_vector();
  size_t r = std::max(want.size(), x.size());
  ExpandPlan p{Shape(r), std::vector<int64_t>(r, 0)};
  std::vector<int64_t> xs = contiguous_strides(x);
  for (size_t i = 0; i < r; ++i) {
    size_t xo = r - x.size(), wo = r - want.size();
    int64_t xd = i >= xo ? x[i - xo] : 1, wd = i >= wo ? want[i - wo] : 1;
    ONYX_CHECK(xd == wd || xd == 1 || wd == 1, "[{}] cannot expand shape {} to {}", ctx.label(),
               shape_str(x), shape_str(want));
    p.out[i] = xd == 1 ? wd : xd;
    if (i >= xo && xd != 1) p.strides[i] = xs[i - xo];
  }
  return p;
}

std::vector<int64_t> tile_repeats(const KernelContext& ctx, const Shape& x, Shape& out) {
  const Tensor& rep = ctx.required_input(1);
  auto reps = rep.to_int64_vector();
  ONYX_CHECK(rep.rank() == 1 && reps.size() == x.size(),
             "[{}] repeats should be 1-D with {} values but has shape {}", ctx.label(), x.size(),
             shape_str(rep.shape()));
  out.clear();
  for (size_t i = 0; i < reps.size(); ++i) {
    ONYX_CHECK(reps[i] >= 0, "[{}] repeats {} has a negative value", ctx.label(), reps);
    out.push_back(checked_dim_mul(x[i], reps[i], ctx.label()));
  }
  return reps;
}

int64_t concat_axis_attr(const KernelInfo& info) {
  return info.opset < 4 ? info.node.attr_int("axis", 1)
                        : info.node.require_attr("axis", Attribute::Type::Int).i;
}

ConcatPlan plan_concat(const KernelContext& ctx, int64_t axis_attr) {
  const Tensor& first = ctx.required_input(0);
  int64_t r = first.rank();
  ONYX_CHECK(r > 0, "[{}] inputs should have rank >= 1 but input 0 is a scalar", ctx.label());
  ConcatPlan p;
  p.axis = static_cast<size_t>(normalize_axis(axis_attr, r, ctx.label()));
  const size_t a = p.axis;
  p.out = first.shape();
  p.out[a] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.required_input(i);
    bool ok = t.dtype() == first.dtype() && t.rank() == r;
    for (size_t d = 0; ok && d < p.out.size(); ++d) ok = d == a || t.shape()[d] == p.out[d];
    ONYX_CHECK(ok, "[{}] input {} is {}{} but input 0 is {}{} (only axis {} may differ)",
               ctx.label(), i, dtype_name(t.dtype()), shape_str(t.shape()),
               dtype_name(first.dtype()), shape_str(first.shape()), a);
    p.out[a] += t.shape()[a];
  }
  p.outer = dims_product(p.out, 0, a);
  p.inner = dims_product(p.out, a + 1, p.out.size());
  return p;
}

SplitAttrs::SplitAttrs(const KernelInfo& info)
    : axis(info.node.attr_int("axis", 0)),
      num_outputs(info.node.attr_int("num_outputs", 0)),
      uneven(info.opset >= 18) {}

SplitPlan plan_split(const KernelContext& ctx, const SplitAttrs& attrs, const Shape& x) {
  SplitPlan p;
  p.axis = static_cast<size_t>(normalize_axis(attrs.axis, static_cast<int64_t>(x.size()),
                                              ctx.label()));
  const size_t axis = p.axis;
  const int64_t dim = x[axis], n = ctx.num_outputs();
  p.outer = dims_product(x, 0, axis);
  p.inner = dims_product(x, axis + 1, x.size());
  std::vector<int64_t>& sizes = p.sizes;
  if (const Tensor* s = ctx.input(1)) {
    sizes = s->to_int64_vector();
    int64_t sum = 0;  // each part within [0, dim], so the running sum cannot overflow
    for (int64_t v : sizes) sum += v < 0 || v > dim ? dim + 1 : v;
    ONYX_CHECK(static_cast<int64_t>(sizes.size()) == n && sum == dim,
               "[{}] split {} should have {} non-negative values summing to {} (axis {} of {})",
               ctx.label(), sizes, n, dim, axis, shape_str(x));
    return p;
  }
  ONYX_CHECK(attrs.num_outputs == 0 || attrs.num_outputs == n,
             "[{}] num_outputs is {} but node has {}", ctx.label(), attrs.num_outputs, n);
  int64_t chunk = attrs.uneven ? (dim + n - 1) / n : dim / n;
  ONYX_CHECK(attrs.uneven || dim % n == 0, "[{}] axis {} of shape {} does not split into {} parts",
             ctx.label(), axis, shape_str(x), n);
  for (int64_t i = 0, left = dim; i < n; ++i, left -= chunk)
    sizes.push_back(std::clamp<int64_t>(left, 0, chunk));
  return p;
}

PadMode parse_pad_mode(const KernelInfo& info) {
  std::string m = info.node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap" && info.opset >= 19) return PadMode::Wrap;
  ONYX_THROW("[{}] unknown mode '{}' at opset {}", info.label(), m, info.opset);
}

PadPlan plan_pad(const KernelContext& ctx, const Shape& x, bool constant_mode) {
  const auto r = static_cast<int64_t>(x.size());
  auto pads = ctx.required_input(1).to_int64_vector();
  std::vector<int64_t> axes;
  if (const Tensor* t = ctx.input(3))
    axes = t->to_int64_vector();
  else
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  auto na = axes.size();
  ONYX_CHECK(pads.size() == 2 * na, "[{}] pads {} should have {} values (2 per axis)", ctx.label(),
             pads, 2 * na);
  PadPlan p{x, std::vector<int64_t>(x.size(), 0), std::vector<int64_t>(x.size(), 0)};
  // Pads are data: bounded so that sizes and source indices stay inside int64.
  constexpr int64_t kMaxPad = int64_t{1} << 62;
  for (int64_t v : pads)
    ONYX_CHECK(v >= -kMaxPad && v <= kMaxPad, "[{}] pads {} should lie in [-2^62, 2^62]",
               ctx.label(), pads);
  for (size_t i = 0; i < na; ++i) {
    auto a = static_cast<size_t>(normalize_axis(axes[i], r, ctx.label()));
    p.before[a] = pads[i];
    p.after[a] = pads[i + na];
  }
  for (size_t a = 0; a < x.size(); ++a) {
    const int64_t d = x[a];
    int64_t with_before = 0;
    ONYX_CHECK(!__builtin_add_overflow(d, p.before[a], &with_before) &&
                   !__builtin_add_overflow(with_before, p.after[a], &p.out[a]),
               "[{}] pads {} make axis {} of shape {} larger than int64", ctx.label(), pads, a,
               shape_str(x));
    ONYX_CHECK(p.out[a] >= 0, "[{}] pads {} shrink axis {} of shape {} below zero", ctx.label(),
               pads, a, shape_str(x));
    ONYX_CHECK(constant_mode || d > 0 || p.out[a] == 0,
               "[{}] cannot pad empty axis {} of shape {} in a non-constant mode", ctx.label(), a,
               shape_str(x));
  }
  return p;
}

}  // namespace onyx
