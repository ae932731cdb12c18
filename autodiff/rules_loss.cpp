// Gradient rules: loss ops. Both losses are -w[t] * logp[n, t, d] per element, so their
// gradients share one per-element coefficient: dL/dloss times the target's weight (0 for
// ignore_index), divided by the weight total for reduction=mean.
#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

/// Per-element coefficient of -dlogp[n, target, d], shaped [N, 1, d1...] to broadcast over
/// the class axis (a scalar when it is the same for every element).
Value* coefficient(GradContext& c, Value* labels) {
  const Node& n = c.node();
  Value *x = c.in(0), *dy = c.dout(0);
  std::string reduction = n.attr_string("reduction", "mean");
  ONYX_CHECK(reduction == "none" || reduction == "sum" || reduction == "mean",
             "{}: reduction should be none, sum or mean but is '{}'", c.label(), reduction);
  // Per-element weight: weight[target], 0 where target == ignore_index; nullptr means all 1.
  Value* w = nullptr;
  Value* safe = labels;
  Value* keep = nullptr;
  if (n.has_attr("ignore_index")) {
    keep = c.op("Not", {c.op("Equal", {labels, c.int_scalar(n.attr_int("ignore_index", 0))})});
    // Ignored targets may lie outside [0, C): gather class 0 for them instead.
    safe = c.op("Where", {keep, labels, c.int_scalar(0)});
  }
  if (Value* weight = c.in(2)) w = c.cast_like(c.op("Gather", {weight, safe}), x);
  if (keep) {
    Value* k = c.cast_like(keep, x);
    w = w ? c.op("Mul", {w, k}) : k;
  }
  Value* coef = dy;
  if (reduction == "mean") {
    Value* total = w ? c.op("ReduceSum", {w}, {Attribute::of_int("keepdims", 0)})
                     : c.cast_like(c.op("Size", {labels}), x);
    coef = c.op("Div", {dy, total});
  }
  if (w) coef = c.op("Mul", {coef, w});
  // A per-element coefficient ([N, d1...]) gets the class axis back.
  if (w || reduction == "none") coef = c.op("Unsqueeze", {coef, c.ints({1})});
  return coef;
}

/// onehot(labels) over axis 1 of x, in x's dtype: labels[n, d] == c for c in [0, C).
Value* one_hot(GradContext& c, Value* labels) {
  Value* x = c.in(0);
  Value* classes = c.op("Range", {c.int_scalar(0), c.op("Gather", {c.shape_of(x), c.int_scalar(1)}),
                                  c.int_scalar(1)});
  // classes as [1, C, 1, ...]: Unsqueeze labels at 1 and compare against [C, 1, ...] aligned.
  Value* lab = c.op("Unsqueeze", {labels, c.ints({1})});
  Value* trailing = c.op("Sub", {c.op("Size", {c.shape_of(x)}), c.int_scalar(2)});
  Value* cshape = c.op(
      "Concat",
      {c.ints({-1}), c.op("Expand", {c.ints({1}), c.op("Unsqueeze", {trailing, c.ints({0})})})},
      {Attribute::of_int("axis", 0)});
  Value* eq = c.op("Equal", {lab, c.op("Reshape", {classes, cshape})});
  return c.cast_like(eq, x);
}

/// Labels as int64 (they may be int32).
Value* labels_of(GradContext& c) {
  Value* t = c.in(1);
  return c.dtype(t) == DataType::Int64
             ? t
             : c.op("Cast", {t}, {Attribute::of_int("to", static_cast<int64_t>(DataType::Int64))});
}

// dscores = coef * (softmax(scores) - onehot(target)); plus the log_prob output's own
// gradient, dlp - softmax * sum_c(dlp)
void softmax_cross_entropy_grad(GradContext& c) {
  Value* prob = c.op("Exp", {c.ensure_out(1)});
  Value* dx = nullptr;
  if (c.dout(0)) {
    Value* labels = labels_of(c);
    dx = c.op("Mul", {c.op("Sub", {prob, one_hot(c, labels)}), coefficient(c, labels)});
  }
  if (Value* dlp = c.dout(1)) {
    Value* s = c.op("ReduceSum", {dlp, c.ints({1})}, {Attribute::of_int("keepdims", 1)});
    Value* t = c.op("Sub", {dlp, c.op("Mul", {prob, s})});
    dx = dx ? c.op("Add", {dx, t}) : t;
  }
  c.set_din(0, dx);
}

// dinput = -coef * onehot(target)
void nll_grad(GradContext& c) {
  Value* labels = labels_of(c);
  c.set_din(0, c.op("Neg", {c.op("Mul", {one_hot(c, labels), coefficient(c, labels)})}));
}

}  // namespace

void add_loss_rules(RuleTable& t) {
  t.add("SoftmaxCrossEntropyLoss", softmax_cross_entropy_grad);
  t.add("NegativeLogLikelihoodLoss", nll_grad);
}

}  // namespace onyx::autodiff
