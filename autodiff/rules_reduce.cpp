// Gradient rules: reductions (the reduced axes are broadcast back with Unsqueeze + Expand).
#include <algorithm>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/shape_inference.h"
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
    // A constant, or a computation over constants (the dynamo exporter's Reshape of a Constant).
    auto known = known_int_values(g, n.inputs[1]);
    ONYX_CHECK(known,
               "{}: the axes input '{}' is computed at run time; its gradient needs constant axes",
               c.label(), n.inputs[1]->name);
    axes = *known;
  }
  if (axes.empty()) {
    ra.noop = n.attr_int("noop_with_empty_axes", 0) != 0;
    ra.all = !ra.noop;
    return ra;
  }
  // Non-negative axes need no rank, so inputs of unknown shape still differentiate.
  int r = c.rank(c.in(0));
  bool negative = std::any_of(axes.begin(), axes.end(), [](int64_t a) { return a < 0; });
  ONYX_CHECK(r >= 0 || !negative, "{}: the rank of '{}' must be known to resolve negative axes",
             c.label(), c.in(0)->name);
  if (r >= 0)
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

/// How many elements each output of the reduction averages: static when the reduced dims
/// are known, else Size(x) / Size(y) at run time.
Value* reduced_count(GradContext& c, const ReduceAxes& ra) {
  Value* x = c.in(0);
  if (const auto& s = c.sym_shape(x)) {
    std::optional<int64_t> n = 1;
    for (size_t i = 0; i < s->size() && n; ++i) {
      bool reduced = ra.all || std::binary_search(ra.axes.begin(), ra.axes.end(), int64_t(i));
      if (!reduced) continue;
      n = (*s)[i].is_fixed() ? std::optional<int64_t>(*n * (*s)[i].value) : std::nullopt;
    }
    if (n) return c.scalar(static_cast<double>(*n), x);
  }
  Value* nx = c.cast_like(c.op("Size", {x}), x);
  return c.op("Div", {nx, c.cast_like(c.op("Size", {c.out(0)}), x)});
}

// d ReduceMean = dy broadcast back / (number of reduced elements)
void reduce_mean_grad(GradContext& c) {
  const Graph& g = *c.node().owner;
  ReduceAxes ra = reduce_axes(c, g);
  if (ra.noop) return c.set_din(0, c.dout(0));
  c.set_din(0, c.op("Div", {broadcast_back(c, ra, c.dout(0)), reduced_count(c, ra)}));
}

/// A reduction output with its reduced axes restored as size 1 (so it broadcasts against x).
Value* keep_reduced_dims(GradContext& c, const ReduceAxes& ra, Value* v) {
  bool keep = c.node().attr_int("keepdims", 1) != 0;
  return keep || ra.all || ra.noop ? v : c.op("Unsqueeze", {v, c.ints(ra.axes)});
}

// d ReduceMax = dy at the positions equal to the max, split evenly among ties (same for Min)
void reduce_extremum_grad(GradContext& c) {
  const Graph& g = *c.node().owner;
  ReduceAxes ra = reduce_axes(c, g);
  if (ra.noop) return c.set_din(0, c.dout(0));
  Value* x = c.in(0);
  Value* hit = c.cast_like(c.op("Equal", {x, keep_reduced_dims(c, ra, c.out(0))}), x);
  std::vector<Value*> sum_in = {hit};
  if (!ra.all) sum_in.push_back(c.ints(ra.axes));
  Value* ties = c.op("ReduceSum", sum_in, {Attribute::of_int("keepdims", 1)});
  Value* share = c.op("Div", {keep_reduced_dims(c, ra, c.dout(0)), ties});
  c.set_din(0, c.op("Mul", {hit, share}));
}

/// dx = dy * local for reductions whose derivative is an elementwise function `local(x, y)` of
/// x and the (broadcast) result: dy and y get their reduced axes back as size 1.
template <typename F>
void reduce_with_local_grad(GradContext& c, F local) {
  ReduceAxes ra = reduce_axes(c, *c.node().owner);
  Value* y = keep_reduced_dims(c, ra, c.out(0));
  c.set_din(0, c.op("Mul", {keep_reduced_dims(c, ra, c.dout(0)), local(c.in(0), y)}));
}

// d ReduceL1 = dy * sign(x)
void reduce_l1_grad(GradContext& c) {
  reduce_with_local_grad(c, [&](Value* x, Value*) { return c.op("Sign", {x}); });
}

// d ReduceL2 = dy * x / y  (0 where the norm is 0)
void reduce_l2_grad(GradContext& c) {
  reduce_with_local_grad(c, [&](Value* x, Value* y) {
    Value* zero = c.scalar(0.0, x);
    return c.op("Where", {c.op("Equal", {y, zero}), zero, c.op("Div", {x, y})});
  });
}

// d ReduceSumSquare = dy * 2x
void reduce_sum_square_grad(GradContext& c) {
  reduce_with_local_grad(c, [&](Value* x, Value*) { return c.op("Mul", {x, c.scalar(2.0, x)}); });
}

// d ReduceLogSum = dy / sum(x) = dy / exp(y), broadcast back
void reduce_log_sum_grad(GradContext& c) {
  ReduceAxes ra = reduce_axes(c, *c.node().owner);
  Value* sum = c.op("Exp", {keep_reduced_dims(c, ra, c.out(0))});
  c.set_din(0, c.op("Div", {broadcast_back(c, ra, c.dout(0)), sum}));
}

// d ReduceLogSumExp = dy * exp(x - y)  (softmax over the reduced axes)
void reduce_log_sum_exp_grad(GradContext& c) {
  reduce_with_local_grad(c, [&](Value* x, Value* y) { return c.op("Exp", {c.op("Sub", {x, y})}); });
}

// d ReduceProd = dy * (product of the other elements): p / x where x != 0, with p the product
// of the non-zero elements; 0 wherever another element of the same reduction is 0.
void reduce_prod_grad(GradContext& c) {
  ReduceAxes ra = reduce_axes(c, *c.node().owner);
  if (ra.noop) return c.set_din(0, c.dout(0));
  reduce_with_local_grad(c, [&](Value* x, Value*) {
    Value* is0 = c.op("Equal", {x, c.scalar(0.0, x)});
    Value* nz = c.op("Where", {is0, c.scalar(1.0, x), x});
    Value* p = c.reduce("ReduceProd", nz, ra.axes, true);
    Value* zeros = c.cast_like(is0, x);
    Value* others0 = c.op("Sub", {c.reduce("ReduceSum", zeros, ra.axes, true), zeros});
    Value* none = c.op("Equal", {others0, c.scalar(0.0, x)});
    return c.op("Where", {none, c.op("Div", {p, nz}), c.scalar(0.0, x)});
  });
}

// d CumSum = CumSum(dy) in the opposite direction, same axis and exclusivity
void cumsum_grad(GradContext& c) {
  int64_t reverse = c.node().attr_int("reverse", 0) != 0 ? 0 : 1;
  int64_t exclusive = c.node().attr_int("exclusive", 0);
  c.set_din(0, c.op("CumSum", {c.dout(0), c.in(1)},
                    {Attribute::of_int("exclusive", exclusive), Attribute::of_int("reverse", reverse)}));
}

}  // namespace

void add_reduce_rules(RuleTable& t) {
  t.add("ReduceSum", reduce_sum_grad);
  t.add("ReduceMean", reduce_mean_grad);
  t.add("ReduceMax", reduce_extremum_grad);
  t.add("ReduceMin", reduce_extremum_grad);
  t.add("CumSum", cumsum_grad);
  t.add("ReduceProd", reduce_prod_grad);
  t.add("ReduceL1", reduce_l1_grad);
  t.add("ReduceL2", reduce_l2_grad);
  t.add("ReduceSumSquare", reduce_sum_square_grad);
  t.add("ReduceLogSum", reduce_log_sum_grad);
  t.add("ReduceLogSumExp", reduce_log_sum_exp_grad);
}

}  // namespace onyx::autodiff
