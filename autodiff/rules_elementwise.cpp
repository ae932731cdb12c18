// Gradient rules: elementwise arithmetic and math (broadcasting undone with sum_to).
#include <cmath>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

// d(a+b) = dy, dy
void add_grad(GradContext& c) {
  if (c.wants(0)) c.set_din(0, c.sum_to(c.dout(0), c.in(0)));
  if (c.wants(1)) c.set_din(1, c.sum_to(c.dout(0), c.in(1)));
}

// d(a-b) = dy, -dy
void sub_grad(GradContext& c) {
  if (c.wants(0)) c.set_din(0, c.sum_to(c.dout(0), c.in(0)));
  if (c.wants(1)) c.set_din(1, c.sum_to(c.op("Neg", {c.dout(0)}), c.in(1)));
}

// d(a*b) = dy*b, dy*a
void mul_grad(GradContext& c) {
  Value* dy = c.dout(0);
  if (c.wants(0)) c.set_din(0, c.sum_to(c.op("Mul", {dy, c.in(1)}), c.in(0)));
  if (c.wants(1)) c.set_din(1, c.sum_to(c.op("Mul", {dy, c.in(0)}), c.in(1)));
}

// d(a/b) = dy/b, -dy*y/b
void div_grad(GradContext& c) {
  Value* dy = c.dout(0);
  if (c.wants(0)) c.set_din(0, c.sum_to(c.op("Div", {dy, c.in(1)}), c.in(0)));
  if (c.wants(1)) {
    Value* t = c.op("Div", {c.op("Mul", {dy, c.out(0)}), c.in(1)});
    c.set_din(1, c.sum_to(c.op("Neg", {t}), c.in(1)));
  }
}

// d(-x) = -dy
void neg_grad(GradContext& c) { c.set_din(0, c.op("Neg", {c.dout(0)})); }

// d Sum(x_i) = dy for each input
void sum_grad(GradContext& c) {
  for (int i = 0; i < c.node().num_inputs(); ++i)
    if (c.wants(i)) c.set_din(i, c.sum_to(c.dout(0), c.in(i)));
}

// d(x) = dy (Identity)
void identity_grad(GradContext& c) { c.set_din(0, c.dout(0)); }

/// Annotates `v` with `ref`'s type (same shape and dtype), so sum_to can reduce statically.
Value* typed_like(Value* v, const Value* ref) {
  v->type = ref->type;
  return v;
}

/// Where(cond, g, 0): g where cond holds, zero elsewhere (`like` gives the zero's dtype).
Value* keep_where(GradContext& c, Value* cond, Value* g, const Value* like) {
  return c.op("Where", {cond, g, c.scalar(0.0, like)});
}

// d a^b = dy * b * a^(b-1), dy * y * ln(a)  (the second is 0 where a == 0, as PyTorch does)
void pow_grad(GradContext& c) {
  Value* a = c.in(0);
  Value* b = c.in(1);
  Value* y = c.out(0);
  Value* dy = c.dout(0);
  bool same = c.dtype(b) == c.dtype(a);
  if (c.wants(0)) {
    Value* bb = same ? b : c.cast_like(b, a);
    Value* pw = c.op("Pow", {a, c.op("Sub", {bb, c.scalar(1.0, a)})});
    Value* g = typed_like(c.op("Mul", {c.op("Mul", {dy, bb}), pw}), y);
    c.set_din(0, c.sum_to(g, a));
  }
  if (c.wants(1)) {
    Value* is0 = c.op("Equal", {a, c.scalar(0.0, a)});
    Value* g = c.op("Mul", {c.op("Mul", {dy, y}), c.op("Log", {a})});
    g = c.op("Where", {is0, c.scalar(0.0, a), g});
    if (!same) g = c.cast_like(g, b);
    g->type = ValueType::tensor(c.dtype(b), c.sym_shape(y));
    c.set_din(1, c.sum_to(g, b));
  }
}

// d sqrt(x) = dy / (2 y)
void sqrt_grad(GradContext& c) {
  c.set_din(0, c.op("Div", {c.dout(0), c.op("Mul", {c.out(0), c.scalar(2.0, c.out(0))})}));
}

// d exp(x) = dy * y
void exp_grad(GradContext& c) { c.set_din(0, c.op("Mul", {c.dout(0), c.out(0)})); }

// d log(x) = dy / x
void log_grad(GradContext& c) { c.set_din(0, c.op("Div", {c.dout(0), c.in(0)})); }

// d |x| = dy * sign(x)  (0 at x == 0)
void abs_grad(GradContext& c) { c.set_din(0, c.op("Mul", {c.dout(0), c.op("Sign", {c.in(0)})})); }

// d (1/x) = -dy * y^2
void reciprocal_grad(GradContext& c) {
  Value* y = c.out(0);
  c.set_din(0, c.op("Neg", {c.op("Mul", {c.dout(0), c.op("Mul", {y, y})})}));
}

// d sin(x) = dy * cos(x)
void sin_grad(GradContext& c) { c.set_din(0, c.op("Mul", {c.dout(0), c.op("Cos", {c.in(0)})})); }

// d cos(x) = -dy * sin(x)
void cos_grad(GradContext& c) {
  c.set_din(0, c.op("Neg", {c.op("Mul", {c.dout(0), c.op("Sin", {c.in(0)})})}));
}

// d tan(x) = dy * (1 + y^2)
void tan_grad(GradContext& c) {
  Value* y = c.out(0);
  c.set_din(0, c.op("Mul", {c.dout(0), c.op("Add", {c.scalar(1.0, y), c.op("Mul", {y, y})})}));
}

/// sqrt(a + b * x^2)
Value* sqrt_quadratic(GradContext& c, double a, double b, Value* x) {
  Value* q = c.op("Mul", {c.op("Mul", {x, x}), c.scalar(b, x)});
  return c.op("Sqrt", {c.op("Add", {c.scalar(a, x), q})});
}

// d asin(x) = dy / sqrt(1 - x^2)
void asin_grad(GradContext& c) {
  c.set_din(0, c.op("Div", {c.dout(0), sqrt_quadratic(c, 1.0, -1.0, c.in(0))}));
}

// d acos(x) = -dy / sqrt(1 - x^2)
void acos_grad(GradContext& c) {
  c.set_din(0, c.op("Neg", {c.op("Div", {c.dout(0), sqrt_quadratic(c, 1.0, -1.0, c.in(0))})}));
}

// d atan(x) = dy / (1 + x^2)
void atan_grad(GradContext& c) {
  Value* x = c.in(0);
  c.set_din(0, c.op("Div", {c.dout(0), c.op("Add", {c.scalar(1.0, x), c.op("Mul", {x, x})})}));
}

// d sinh(x) = dy * cosh(x)
void sinh_grad(GradContext& c) { c.set_din(0, c.op("Mul", {c.dout(0), c.op("Cosh", {c.in(0)})})); }

// d cosh(x) = dy * sinh(x)
void cosh_grad(GradContext& c) { c.set_din(0, c.op("Mul", {c.dout(0), c.op("Sinh", {c.in(0)})})); }

// d asinh(x) = dy / sqrt(x^2 + 1)
void asinh_grad(GradContext& c) {
  c.set_din(0, c.op("Div", {c.dout(0), sqrt_quadratic(c, 1.0, 1.0, c.in(0))}));
}

// d acosh(x) = dy / sqrt(x^2 - 1)
void acosh_grad(GradContext& c) {
  c.set_din(0, c.op("Div", {c.dout(0), sqrt_quadratic(c, -1.0, 1.0, c.in(0))}));
}

// d atanh(x) = dy / (1 - x^2)
void atanh_grad(GradContext& c) {
  Value* x = c.in(0);
  c.set_din(0, c.op("Div", {c.dout(0), c.op("Sub", {c.scalar(1.0, x), c.op("Mul", {x, x})})}));
}

// d Max(x_1..x_n) / d x_i = dy * [x_i == y] / #{j : x_j == y}  (ties split evenly; same for Min)
void min_max_grad(GradContext& c) {
  int n = c.node().num_inputs();
  Value* y = c.out(0);
  if (n == 1) return c.set_din(0, c.dout(0));
  std::vector<Value*> hits;
  for (int i = 0; i < n; ++i) hits.push_back(c.cast_like(c.op("Equal", {c.in(i), y}), y));
  // Share of dy per winning element: central differences at a tie see exactly this split.
  Value* share = c.op("Div", {c.dout(0), c.op("Sum", hits)});
  for (int i = 0; i < n; ++i)
    if (c.wants(i)) c.set_din(i, c.sum_to(typed_like(c.op("Mul", {share, hits[i]}), y), c.in(i)));
}

// d Mean(x_1..x_n) = dy / n for each input
void mean_grad(GradContext& c) {
  int n = c.node().num_inputs();
  Value* g = typed_like(c.op("Mul", {c.dout(0), c.scalar(1.0 / n, c.out(0))}), c.out(0));
  for (int i = 0; i < n; ++i)
    if (c.wants(i)) c.set_din(i, c.sum_to(g, c.in(i)));
}

// d clip(x, lo, hi) = dy * [lo <= x <= hi]  (lo, hi carry no gradient)
void clip_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* inside = nullptr;
  if (Value* lo = c.in(1)) inside = c.op("GreaterOrEqual", {x, lo});
  if (Value* hi = c.in(2)) {
    Value* below = c.op("LessOrEqual", {x, hi});
    inside = inside ? c.op("And", {inside, below}) : below;
  }
  c.set_din(0, inside ? keep_where(c, inside, c.dout(0), x) : c.dout(0));
}

// d where(cond, a, b) = where(cond, dy, 0), where(cond, 0, dy)
void where_grad(GradContext& c) {
  Value* cond = c.in(0);
  Value* y = c.out(0);
  Value* zero = c.scalar(0.0, y);
  if (c.wants(1))
    c.set_din(1, c.sum_to(typed_like(c.op("Where", {cond, c.dout(0), zero}), y), c.in(1)));
  if (c.wants(2))
    c.set_din(2, c.sum_to(typed_like(c.op("Where", {cond, zero, c.dout(0)}), y), c.in(2)));
}

// d cast(x) = cast(dy) back to x's dtype
void cast_grad(GradContext& c) { c.set_din(0, c.cast_like(c.dout(0), c.in(0))); }

// d CastLike(x, like) = cast(dy) back to x's dtype (like only gives the dtype)
void cast_like_grad(GradContext& c) { c.set_din(0, c.cast_like(c.dout(0), c.in(0))); }

// d mod(a, b) = dy, -dy * q with a = b q + mod(a, b): q = trunc(a / b) for fmod=1 (C fmod),
// floor(a / b) otherwise (the remainder takes the divisor's sign)
void mod_grad(GradContext& c) {
  Value *a = c.in(0), *b = c.in(1), *y = c.out(0), *dy = c.dout(0);
  if (c.wants(0)) c.set_din(0, c.sum_to(dy, a));
  if (c.wants(1)) {
    Value* r = c.op("Div", {a, b});
    Value* q = c.node().attr_int("fmod", 0) != 0
                   ? c.op("Mul", {c.op("Sign", {r}), c.op("Floor", {c.op("Abs", {r})})})
                   : c.op("Floor", {r});
    c.set_din(1, c.sum_to(typed_like(c.op("Neg", {c.op("Mul", {dy, q})}), y), b));
  }
}

// d f(x) = 0 for the piecewise-constant Sign, Floor, Ceil, Round (as PyTorch)
void zero_grad(GradContext& c) {
  Value* x = c.in(0);
  c.set_din(0, c.op("Expand", {c.scalar(0.0, x), c.shape_of(x)}));
}

}  // namespace

void add_elementwise_rules(RuleTable& t) {
  t.add("Add", add_grad);
  t.add("Sub", sub_grad);
  t.add("Mul", mul_grad);
  t.add("Div", div_grad);
  t.add("Neg", neg_grad);
  t.add("Identity", identity_grad);
  t.add("Sum", sum_grad);
  t.add("Pow", pow_grad);
  t.add("Sqrt", sqrt_grad);
  t.add("Exp", exp_grad);
  t.add("Log", log_grad);
  t.add("Abs", abs_grad);
  t.add("Reciprocal", reciprocal_grad);
  t.add("Sin", sin_grad);
  t.add("Cos", cos_grad);
  t.add("Tan", tan_grad);
  t.add("Asin", asin_grad);
  t.add("Acos", acos_grad);
  t.add("Atan", atan_grad);
  t.add("Sinh", sinh_grad);
  t.add("Cosh", cosh_grad);
  t.add("Asinh", asinh_grad);
  t.add("Acosh", acosh_grad);
  t.add("Atanh", atanh_grad);
  t.add("Max", min_max_grad);
  t.add("Min", min_max_grad);
  t.add("Mean", mean_grad);
  t.add("Clip", clip_grad);
  t.add("Where", where_grad);
  t.add("Cast", cast_grad);
  t.add("CastLike", cast_like_grad);
  t.add("Mod", mod_grad);
  for (const char* op : {"Sign", "Floor", "Ceil", "Round"}) t.add(op, zero_grad);
}

}  // namespace onyx::autodiff
