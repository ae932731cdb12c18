// Gradient rules: normalizations. Each works on a view of X whose last axis holds the elements
// one statistic covers ([N, C, S] for BatchNormalization, [N, G, -1] for group and instance
// norms, [outer, inner] for the row norms), so X's rank need not be known. With xh = (x - mean)
// * inv and g the gradient reaching xh, the input gets inv * (g - mean(g) - xh * mean(g * xh)).
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

using Ints = std::vector<int64_t>;

/// v cast to x's dtype when it differs (or is not known).
Value* as_dtype_of(GradContext& c, Value* v, Value* x) {
  bool same = v->type.is_tensor() && v->type.elem == c.dtype(x);
  return same ? v : c.cast_like(v, x);
}

/// Zeros with v's dtype and shape (the gradient of a parameter no consumed output depends on).
Value* zeros_like(GradContext& c, Value* v) {
  return c.op("Expand", {c.scalar(0.0, v), c.shape_of(v)});
}

/// a + b, where either may be absent.
Value* add_opt(GradContext& c, Value* a, Value* b) { return !a ? b : !b ? a : c.op("Add", {a, b}); }

/// The number of elements static dims give v, when all are known.
std::optional<int64_t> static_numel(const GradContext& c, const Value* v) {
  const auto& s = c.sym_shape(v);
  if (!s) return std::nullopt;
  int64_t n = 1;
  for (const Dim& d : *s) {
    if (!d.is_fixed()) return std::nullopt;
    n *= d.value;
  }
  return n;
}

/// Statistics of a view `v` of x over its `axes` (kept as size 1): xc = v - mean (v itself when
/// not centred, as RMSNormalization), inv = 1 / sqrt(mean(xc^2) + eps), xh = xc * inv.
struct Moments {
  Value *xc, *inv, *xh;
};

Moments moments(GradContext& c, Value* v, Value* x, const Ints& axes, double eps, bool center) {
  Moments m;
  m.xc = center ? c.op("Sub", {v, c.reduce("ReduceMean", v, axes, true)}) : v;
  Value* var = c.reduce("ReduceMean", c.op("Mul", {m.xc, m.xc}), axes, true);
  m.inv = c.op("Reciprocal", {c.op("Sqrt", {c.op("Add", {var, c.scalar(eps, x)})})});
  m.xh = c.op("Mul", {m.xc, m.inv});
  return m;
}

/// dx of xh = (x - mean) * inv (or x * inv when not centred) over `axes`, given g = dL/dxh:
/// inv * (g - mean(g) - xh * mean(g * xh)).
Value* normalize_backward(GradContext& c, Value* g, const Moments& m, const Ints& axes,
                          bool center) {
  Value* t = c.op("Mul", {m.xh, c.reduce("ReduceMean", c.op("Mul", {g, m.xh}), axes, true)});
  t = c.op("Sub", {g, t});
  if (center) t = c.op("Sub", {t, c.reduce("ReduceMean", g, axes, true)});
  return c.op("Mul", {t, m.inv});
}

// train: dx = scale*inv*(dy - mean(dy) - xh*mean(dy*xh)) + (1 - momentum)*(drm + 2 drv xc)/m,
// with drm, drv the gradients reaching the updated running mean / var outputs, xc = x - mean;
// dscale = sum(dy*xh), dB = sum(dy), batch statistics over the m = N*S values of a channel.
// Inference: dx = dy*scale*inv.
void batch_norm_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *dy = c.dout(0);
  double eps = n.attr_float("epsilon", 1e-5f);
  double momentum = n.attr_float("momentum", 0.9f);
  bool training = n.attr_int("training_mode", 0) != 0;
  ONYX_CHECK(training || (!c.dout(1) && !c.dout(2)),
             "{}: outputs 1 and 2 (running mean and variance) exist only in training mode",
             c.label());
  // Work on [N, C, S] views so X's rank need not be known.
  Value* x3 = c.op("Reshape", {x, c.ints({0, 0, -1})});
  auto per_channel = [&](Value* p) {
    return c.op("Reshape", {as_dtype_of(c, p, x), c.ints({1, -1, 1})});
  };
  Value* axes = c.ints({0, 2});
  auto sum = [&](Value* v) {
    return c.op("ReduceSum", {v, axes}, {Attribute::of_int("keepdims", 1)});
  };
  Value *mean, *var, *m = nullptr;
  if (training) {
    m = c.cast_like(
        c.op("Div", {c.op("Size", {x}), c.op("Gather", {c.shape_of(x), c.int_scalar(1)})}), x);
    mean = c.op("Div", {sum(x3), m});
  } else {
    mean = per_channel(c.in(3));
  }
  Value* xc = c.op("Sub", {x3, mean});
  var = training ? c.op("Div", {sum(c.op("Mul", {xc, xc})), m}) : per_channel(c.in(4));
  Value* inv = c.op("Reciprocal", {c.op("Sqrt", {c.op("Add", {var, c.scalar(eps, x)})})});
  Value* xh = c.op("Mul", {xc, inv});
  Value* dy3 = dy ? c.op("Reshape", {dy, c.ints({0, 0, -1})}) : nullptr;
  Value* sdy = dy3 ? sum(dy3) : nullptr;
  Value* sdyxh = dy3 ? sum(c.op("Mul", {dy3, xh})) : nullptr;
  auto to_param = [&](Value* v, int i) {
    if (!v) return zeros_like(c, c.in(i));
    v = c.op("Reshape", {v, c.ints({-1})});
    return c.dtype(c.in(i)) == c.dtype(x) ? v : c.cast_like(v, c.in(i));
  };
  if (c.wants(0)) {
    Value* dx = nullptr;
    if (dy3) {
      Value* g = dy3;
      if (training) {
        g = c.op("Sub", {g, c.op("Div", {sdy, m})});
        g = c.op("Sub", {g, c.op("Mul", {xh, c.op("Div", {sdyxh, m})})});
      }
      dx = c.op("Mul", {g, c.op("Mul", {per_channel(c.in(1)), inv})});
    }
    // running = momentum * running + (1 - momentum) * batch statistic
    if (Value* drm = c.dout(1)) {
      Value* share = c.op("Div", {c.op("Mul", {per_channel(drm), c.scalar(1 - momentum, x)}), m});
      dx = add_opt(c, dx, c.op("Expand", {share, c.shape_of(x3)}));
    }
    if (Value* drv = c.dout(2)) {
      Value* k = c.op("Div", {c.op("Mul", {per_channel(drv), c.scalar(2 * (1 - momentum), x)}), m});
      dx = add_opt(c, dx, c.op("Mul", {xc, k}));
    }
    c.set_din(0, c.op("Reshape", {dx, c.shape_of(x)}));
  }
  if (c.wants(1)) c.set_din(1, to_param(sdyxh, 1));
  if (c.wants(2)) c.set_din(2, to_param(sdy, 2));
}

/// The [outer, inner] view of the row norms, which normalise X.shape[axis:] (a negative axis
/// counts from the end): its shape as a value, and inner as a count of x's dtype.
struct Rows {
  Value *shape2, *inner;
};

Rows rows_view(GradContext& c, Value* x, int64_t axis) {
  Value* outer = c.op("ReduceProd", {c.op("Slice", {c.shape_of(x), c.ints({0}), c.ints({axis})})},
                      {Attribute::of_int("keepdims", 1)});
  Rows r;
  r.shape2 = c.op("Concat", {outer, c.ints({-1})}, {Attribute::of_int("axis", 0)});
  Value* x2 = c.op("Reshape", {x, r.shape2});
  r.inner = c.cast_like(c.op("Gather", {c.shape_of(x2), c.int_scalar(1)}), x);
  return r;
}

// dx = inv*(g - mean(g) - xh*mean(g*xh)) + (dmean - dinv * inv^2 * xh) / inner, with
// g = dy*scale, xh = (x - mean)*inv over the normalized axes, dmean and dinv the gradients
// reaching the Mean and InvStdDev outputs; dscale = sum(dy*xh), dB = sum(dy) (broadcasting undone)
void layer_norm_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *scale = c.in(1), *dy = c.dout(0);
  double eps = n.attr_float("epsilon", 1e-5f);
  Rows rows = rows_view(c, x, n.attr_int("axis", -1));
  Value* x2 = c.op("Reshape", {x, rows.shape2});
  Moments m;
  auto stash = static_cast<DataType>(n.attr_int("stash_type", 1));
  if (stash == c.dtype(x)) {
    // The kernel's Mean / InvStdDev outputs are exact in X's dtype: reuse them.
    m.xc = c.op("Sub", {x2, c.op("Reshape", {c.ensure_out(1), c.ints({-1, 1})})});
    m.inv = c.op("Reshape", {c.ensure_out(2), c.ints({-1, 1})});
    m.xh = c.op("Mul", {m.xc, m.inv});
  } else {
    m = moments(c, x2, x, {1}, eps, true);
  }
  if (c.wants(0)) {
    Value* dx = nullptr;
    if (dy) {
      Value* g2 = c.op("Reshape", {c.op("Mul", {dy, scale}), rows.shape2});
      dx = normalize_backward(c, g2, m, {1}, true);
    }
    // d mean / dx = 1 / inner; d inv / dx = -inv^3 (x - mean) / inner = -inv^2 xh / inner.
    Value* dstats = nullptr;
    if (Value* dmean = c.dout(1))
      dstats = c.op("Reshape", {as_dtype_of(c, dmean, x), c.ints({-1, 1})});
    if (Value* dinv = c.dout(2)) {
      Value* di = c.op("Reshape", {as_dtype_of(c, dinv, x), c.ints({-1, 1})});
      Value* k = c.op("Mul", {c.op("Neg", {di}), c.op("Mul", {m.inv, m.inv})});
      dstats = add_opt(c, dstats, c.op("Mul", {k, m.xh}));
    }
    if (dstats) {
      if (!dy) dstats = c.op("Expand", {dstats, c.shape_of(x2)});
      dx = add_opt(c, dx, c.op("Div", {dstats, rows.inner}));
    }
    c.set_din(0, c.op("Reshape", {dx, c.shape_of(x)}));
  }
  if (c.wants(1)) {
    Value* xh = c.op("Reshape", {m.xh, c.shape_of(x)});
    c.set_din(1, dy ? c.sum_to(c.op("Mul", {dy, xh}), scale) : zeros_like(c, scale));
  }
  if (c.wants(2)) c.set_din(2, dy ? c.sum_to(dy, c.in(2)) : zeros_like(c, c.in(2)));
}

// RMSNormalization: y = x * inv * scale, inv = 1/sqrt(mean(x^2) + eps) over X.shape[axis:]:
// dx = inv*(g - xh*mean(g*xh)) with g = dy*scale, xh = x*inv; dscale = sum(dy*xh)
void rms_norm_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *scale = c.in(1), *dy = c.dout(0);
  Rows rows = rows_view(c, x, n.attr_int("axis", -1));
  Value* x2 = c.op("Reshape", {x, rows.shape2});
  Moments m = moments(c, x2, x, {1}, n.attr_float("epsilon", 1e-5f), false);
  if (c.wants(0)) {
    Value* g2 = c.op("Reshape", {c.op("Mul", {dy, scale}), rows.shape2});
    c.set_din(0, c.op("Reshape", {normalize_backward(c, g2, m, {1}, false), c.shape_of(x)}));
  }
  if (c.wants(1)) {
    Value* xh = c.op("Reshape", {m.xh, c.shape_of(x)});
    c.set_din(1, c.sum_to(c.op("Mul", {dy, xh}), scale));
  }
}

/// GroupNormalization and InstanceNormalization (groups = 0: one group per channel). Statistics
/// over [N, G, -1] blocks; scale and B hold one value per channel, or per group (the
/// GroupNormalization-18 form, told by their size).
void group_norm_backward(GradContext& c, int64_t groups) {
  const Node& n = c.node();
  Value *x = c.in(0), *scale = c.in(1), *dy = c.dout(0);
  Value* gview = c.ints({0, groups, -1});
  Value* x3 = c.op("Reshape", {x, gview});
  Moments m = moments(c, x3, x, {2}, n.attr_float("epsilon", 1e-5f), true);
  // Per group when scale has G values (also right when G == C); per channel otherwise. With an
  // unknown size, the opset decides: GroupNormalization-21 made scale per channel.
  bool per_group = groups == 0;
  if (!per_group) {
    auto ns = static_numel(c, scale);
    per_group = ns ? *ns == groups : c.opset() < 21;
  }
  Value* sc = c.op("Reshape", {scale, c.ints({1, -1, 1})});
  // dyv: dy in the view the parameters index ([N, G, -1] or [N, C, S]).
  Value* dyv = c.op("Reshape", {dy, per_group ? gview : c.ints({0, 0, -1})});
  Value* xhv = per_group ? m.xh : c.op("Reshape", {m.xh, c.shape_of(dyv)});
  if (c.wants(0)) {
    Value* g = c.op("Mul", {dyv, sc});
    if (!per_group) g = c.op("Reshape", {g, gview});
    c.set_din(0, c.op("Reshape", {normalize_backward(c, g, m, {2}, true), c.shape_of(x)}));
  }
  auto param_grad = [&](Value* v, Value* p) {
    Value* s = c.op("ReduceSum", {v, c.ints({0, 2})}, {Attribute::of_int("keepdims", 0)});
    return c.op("Reshape", {s, c.shape_of(p)});
  };
  if (c.wants(1)) c.set_din(1, param_grad(c.op("Mul", {dyv, xhv}), scale));
  if (c.wants(2)) c.set_din(2, param_grad(dyv, c.in(2)));
}

void group_norm_grad(GradContext& c) {
  int64_t groups = c.node().attr_int("num_groups", 0);
  ONYX_CHECK(groups >= 1, "{}: attribute num_groups must be >= 1, found {}", c.label(), groups);
  group_norm_backward(c, groups);
}

void instance_norm_grad(GradContext& c) { group_norm_backward(c, 0); }

// LpNormalization: y = x / |x|_p along axis: dx = (dy - s * sum(dy*y)) / |x|_p with
// s = d|x|_p/dx (y for p = 2, sign(x) for p = 1); 0 where the norm is 0 (the kernel gives 0 there)
void lp_norm_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *y = c.out(0), *dy = c.dout(0);
  int64_t p = n.attr_int("p", 2);
  ONYX_CHECK(p == 1 || p == 2, "{}: attribute p must be 1 or 2, found {}", c.label(), p);
  Value* axes = c.ints({n.attr_int("axis", -1)});
  auto sum = [&](Value* v) {
    return c.op("ReduceSum", {v, axes}, {Attribute::of_int("keepdims", 1)});
  };
  Value* norm = p == 2 ? c.op("Sqrt", {sum(c.op("Mul", {x, x}))}) : sum(c.op("Abs", {x}));
  Value* s = p == 2 ? y : c.op("Sign", {x});
  Value* t = c.op("Sub", {dy, c.op("Mul", {s, sum(c.op("Mul", {dy, y}))})});
  Value* zero = c.scalar(0.0, x);
  c.set_din(0, c.op("Where", {c.op("Equal", {norm, zero}), zero, c.op("Div", {t, norm})}));
}

// MeanVarianceNormalization: y = (x - mean) / (std + 1e-9) over `axes`:
// dx = (dy - mean(dy)) / s - xc * mean(dy * xc) / (s^2 std), s = std + 1e-9
void mvn_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  Ints axes = c.node().attr_ints("axes", {0, 2, 3});
  Value* xc = c.op("Sub", {x, c.reduce("ReduceMean", x, axes, true)});
  Value* sd = c.op("Sqrt", {c.reduce("ReduceMean", c.op("Mul", {xc, xc}), axes, true)});
  Value* s = c.op("Add", {sd, c.scalar(1e-9, x)});
  Value* first = c.op("Div", {c.op("Sub", {dy, c.reduce("ReduceMean", dy, axes, true)}), s});
  Value* k = c.op("Div", {c.reduce("ReduceMean", c.op("Mul", {dy, xc}), axes, true),
                          c.op("Mul", {c.op("Mul", {s, s}), sd})});
  c.set_din(0, c.op("Sub", {first, c.op("Mul", {xc, k})}));
}

// LRN: y = x * d^-beta, d = bias + alpha/size * (sum of x^2 over the channel window [c-lo, c+hi]):
// dx = dy * d^-beta - 2 beta alpha/size * x * (sum over the windows holding x of dy*x*d^(-beta-1)).
// Channel window sums are Convs of [N, 1, C, S] views with a [size, 1] kernel of ones; the
// adjoint window is mirrored (pads hi, lo instead of lo, hi).
void lrn_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *dy = c.dout(0);
  double alpha = n.attr_float("alpha", 1e-4f), beta = n.attr_float("beta", 0.75f);
  double bias = n.attr_float("bias", 1.0f);
  int64_t size = n.attr_int("size", 0);
  ONYX_CHECK(size >= 1, "{}: attribute size must be >= 1, found {}", c.label(), size);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  auto view = [&](Value* v) {
    return c.op("Unsqueeze", {c.op("Reshape", {v, c.ints({0, 0, -1})}), c.ints({1})});
  };
  Value* ones = c.op("Expand", {c.scalar(1.0, x), c.ints({1, 1, size, 1})});
  auto window_sum = [&](Value* v, int64_t before, int64_t after) {
    return c.op("Conv", {v, ones}, {Attribute::of_ints("pads", {before, 0, after, 0})});
  };
  Value *x4 = view(x), *dy4 = view(dy);
  double k = alpha / static_cast<double>(size);
  Value* d =
      c.op("Add", {c.scalar(bias, x),
                   c.op("Mul", {window_sum(c.op("Mul", {x4, x4}), lo, hi), c.scalar(k, x)})});
  Value* direct = c.op("Mul", {dy4, c.op("Pow", {d, c.scalar(-beta, x)})});
  Value* t = c.op("Mul", {c.op("Mul", {dy4, x4}), c.op("Pow", {d, c.scalar(-beta - 1, x)})});
  Value* cross =
      c.op("Mul", {x4, c.op("Mul", {window_sum(t, hi, lo), c.scalar(-2 * beta * k, x)})});
  c.set_din(0, c.op("Reshape", {c.op("Add", {direct, cross}), c.shape_of(x)}));
}

}  // namespace

void add_norm_rules(RuleTable& t) {
  t.add("BatchNormalization", batch_norm_grad);
  t.add("LayerNormalization", layer_norm_grad);
  t.add("RMSNormalization", rms_norm_grad);
  t.add("GroupNormalization", group_norm_grad);
  t.add("InstanceNormalization", instance_norm_grad);
  t.add("LpNormalization", lp_norm_grad);
  t.add("MeanVarianceNormalization", mvn_grad);
  t.add("LRN", lrn_grad);
}

}  // namespace onyx::autodiff
