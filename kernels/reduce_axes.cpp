// Reduction axes and output shapes for every provider (kernels/reduce_axes.h).
#include "kernels/reduce_axes.h"

#include "kernels/shape_util.h"

namespace onyx {

ReduceAttrs::ReduceAttrs(const KernelInfo& info)
    : keepdims(info.node.attr_int("keepdims", 1) != 0),
      noop_with_empty_axes(info.node.attr_int("noop_with_empty_axes", 0) != 0) {
  if (info.node.has_attr("axes")) attr_axes = info.node.attr_ints("axes");
}

ReducedAxes reduced_axes(const KernelContext& ctx, const ReduceAttrs& a, const Shape& x) {
  const auto rank = static_cast<int64_t>(x.size());
  ReducedAxes r{std::vector<bool>(x.size(), false), {}};
  const Tensor* axes_t = opt_input(ctx, 1);
  if (axes_t) {
    ONYX_CHECK(axes_t->dtype() == DataType::Int64 && axes_t->rank() <= 1,
               "[{}] axes (input 1) should be a 1-D int64 tensor but is {} of shape {}",
               ctx.label(), dtype_name(axes_t->dtype()), shape_str(axes_t->shape()));
  }
  const std::vector<int64_t> axes =
      axes_t ? axes_t->to_int64_vector() : a.attr_axes.value_or(std::vector<int64_t>{});
  // No axes: reduce everything, or (noop_with_empty_axes) reduce over no axis at all.
  if (axes.empty() && !a.noop_with_empty_axes) r.reduced.assign(x.size(), true);
  for (int64_t v : axes) {
    const auto ax = static_cast<size_t>(normalize_axis(v, rank, ctx.label()));
    ONYX_CHECK(!r.reduced[ax], "[{}] axes {} name axis {} twice", ctx.label(), fmt::join(axes, ","),
               ax);
    r.reduced[ax] = true;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!r.reduced[i]) r.out.push_back(x[i]);
    else if (a.keepdims) r.out.push_back(1);
  }
  return r;
}

ArgReduceAttrs::ArgReduceAttrs(const KernelInfo& info)
    : axis(info.node.attr_int("axis", 0)),
      keepdims(info.node.attr_int("keepdims", 1) != 0),
      select_last(info.node.attr_int("select_last_index", 0) != 0) {}

Shape arg_reduce_shape(const KernelContext& ctx, const ArgReduceAttrs& a, const Shape& x,
                       int64_t& axis) {
  const auto rank = static_cast<int64_t>(x.size());
  ONYX_CHECK(rank >= 1, "[{}] input should have rank >= 1 but is a scalar", ctx.label());
  axis = normalize_axis(a.axis, rank, ctx.label());
  const auto ax = static_cast<size_t>(axis);
  const int64_t rest = dims_product(x, 0, ax) * dims_product(x, ax + 1, x.size());
  ONYX_CHECK(x[ax] > 0 || rest == 0,
             "[{}] cannot take the index of an extreme along axis {} of size 0 (input shape {})",
             ctx.label(), axis, shape_str(x));
  Shape out = x;
  if (a.keepdims) out[ax] = 1;
  else out.erase(out.begin() + axis);
  return out;
}

}  // namespace onyx
