#include "kernels/slice_plan.h"

#include <algorithm>
#include <limits>

#include "kernels/shape_util.h"

namespace onyx {

SlicePlan plan_slice(const KernelContext& ctx, const Shape& x_shape) {
  auto starts = ctx.required_input(1).to_int64_vector();
  auto ends = ctx.required_input(2).to_int64_vector();
  const int64_t r = static_cast<int64_t>(x_shape.size());
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (const Tensor* t = ctx.input(3))
    axes = t->to_int64_vector();
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (const Tensor* t = ctx.input(4)) steps = t->to_int64_vector();
  ONYX_CHECK(
      ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
      "[{}] starts {}, ends {}, axes {} and steps {} should have the same length", ctx.label(),
      starts, ends, axes, steps);
  Shape out = x_shape;
  auto xs = contiguous_strides(x_shape);
  std::vector<int64_t> strides = xs;
  std::vector<bool> seen(static_cast<size_t>(r), false);
  int64_t base = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    auto a = static_cast<size_t>(normalize_axis(axes[i], r, ctx.label()));
    ONYX_CHECK(!seen[a], "[{}] axes {} repeats an axis", ctx.label(), axes);
    seen[a] = true;
    int64_t d = x_shape[a], step = steps[i], s = starts[i], e = ends[i];
    ONYX_CHECK(step != 0, "[{}] steps {} has a zero", ctx.label(), steps);
    if (s < 0) s += d;
    if (e < 0) e += d;
    // Counted without forming step + span or -step, and the stride only kept when two or
    // more elements are taken: a step of 1e18 over one element overflowed (model fuzz target).
    int64_t n;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      n = e > s ? 1 + (e - s - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      const int64_t back = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      n = s > e ? 1 + (s - e - 1) / back : 0;
    }
    out[a] = n;
    if (n > 0) base += s * xs[a];
    strides[a] = n > 1 ? xs[a] * step : 0;
  }
  return {out, base, strides};
}

}  // namespace onyx
