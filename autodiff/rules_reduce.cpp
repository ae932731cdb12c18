// Gradient rules: reductions (the reduced axes are broadcast back with Unsqueeze + Expand).
#include <algorithm>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

/// The reduced axes of a Reduce* node, normalised and sorted: from the `axes` attribute
/// (older opsets) or a constant `axes` input. Empty means all axes. onyx::Error when the
/// axes are computed at run time and keepdims=0 (their positions must be known here).
struct ReduceAxes {
  std::vector<int64_t> axes;  // empty: all (or none with noop_with_empty_axes)
  bool all = false;
  bool noop = false;
};

ReduceAxes reduce_axes(GradContext& c, const Graph& g) {
  const Node& n = c.node();
  ReduceAxes ra;
  std::vector<int64_t> axes;
  if (n.has_attr("axes")) {
    axes = n.attr_ints("axes");
  } else if (n.has_input(1)) {
    const Tensor* t = g.initializer(n.inputs[1]);
    ONYX_CHECK(t, "{}: the axes input '{}' is computed at run time; its gradient needs constant axes",
               c.label(), n.inputs[1]->name);
    axes = t->to_int64_vector();
  }
  if (axes.empty()) {
    ra.noop = n.attr_int("noop_with_empty_axes", 0) != 0;
    ra.all = !ra.noop;
    return ra;
  }
  int r = c.rank(c.in(0));
  ONYX_CHECK(r >= 0, "{}: the rank of '{}' must be known", c.label(), c.in(0)->name);
  for (int64_t& a : axes) a = c.norm_axis(a, r);
  std::sort(axes.begin(), axes.end());
  ra.axes = axes;
  return ra;
}

/// dy (shaped like the reduction's output) broadcast back to x's shape.
Value* broadcast_back(GradContext& c, const ReduceAxes& ra, Value* dy) {
  bool keep = c.node().attr_int("keepdims", 1) != 0;
  if (!keep && !ra.all && !ra.axes.empty()) dy = c.op("Unsqueeze", {dy, c.ints(ra.axes)});
  return c.op("Expand", {dy, c.shape_of(c.in(0))});
}

}  // namespace

namespace {

// d ReduceSum = dy broadcast back
void reduce_sum_grad(GradContext& c) {
  const Graph& g = *c.node().owner;
  ReduceAxes ra = reduce_axes(c, g);
  if (ra.noop) return c.set_din(0, c.dout(0));
  c.set_din(0, broadcast_back(c, ra, c.dout(0)));
}

}  // namespace

void add_reduce_rules(RuleTable& t) { t.add("ReduceSum", reduce_sum_grad); }

}  // namespace onyx::autodiff
