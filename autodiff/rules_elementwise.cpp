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

}  // namespace


void add_elementwise_rules(RuleTable& t) {
  t.add("Add", add_grad);
  t.add("Sub", sub_grad);
  t.add("Mul", mul_grad);
  t.add("Div", div_grad);
  t.add("Neg", neg_grad);
  t.add("Identity", identity_grad);
  t.add("Sum", sum_grad);
}

}  // namespace onyx::autodiff
