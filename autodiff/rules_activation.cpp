// Gradient rules: activation ops (elementwise, PRelu with its broadcast slope, Softmax/LogSoftmax
// along one axis and Dropout, which reuses its mask output).
#include <cmath>
#include <numbers>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"
#include "graph/gelu_pattern.h"

namespace onyx::autodiff {

namespace {

/// 1 - v (a fresh node).
Value* one_minus(GradContext& c, Value* v, const Value* like) {
  return c.op("Sub", {c.scalar(1.0, like), v});
}

/// Where(cond, a, b) for a boolean `cond`.
Value* select(GradContext& c, Value* cond, Value* a, Value* b) {
  return c.op("Where", {cond, a, b});
}

/// The forward node's float attribute as the kernel reads it (float precision).
double attr_as_kernel(const GradContext& c, const std::string& name, float def) {
  return static_cast<double>(c.node().attr_float(name, def));
}

// d relu(x) = dy * [y > 0]  (reads the output, so the input need not be kept)
void relu_grad(GradContext& c) {
  Value* y = c.out(0);
  Value* pos = c.op("Greater", {y, c.scalar(0.0, y)});
  c.set_din(0, select(c, pos, c.dout(0), c.scalar(0.0, y)));
}

// d leaky_relu(x) = dy * (x > 0 ? 1 : alpha)  (y > 0 tells the same when alpha > 0)
void leaky_relu_grad(GradContext& c) {
  double alpha = attr_as_kernel(c, "alpha", 0.01f);
  Value* v = alpha > 0 ? c.out(0) : c.in(0);
  Value* dy = c.dout(0);
  Value* pos = c.op("Greater", {v, c.scalar(0.0, v)});
  c.set_din(0, select(c, pos, dy, c.op("Mul", {dy, c.scalar(alpha, v)})));
}

// d sigmoid(x) = dy * y * (1 - y)
void sigmoid_grad(GradContext& c) {
  Value* y = c.out(0);
  c.set_din(0, c.op("Mul", {c.op("Mul", {c.dout(0), y}), one_minus(c, y, y)}));
}

// d tanh(x) = dy * (1 - y^2)
void tanh_grad(GradContext& c) {
  Value* y = c.out(0);
  c.set_din(0, c.op("Mul", {c.dout(0), one_minus(c, c.op("Mul", {y, y}), y)}));
}

// d erf(x) = dy * 2/sqrt(pi) * exp(-x^2)
void erf_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* e = c.op("Exp", {c.op("Neg", {c.op("Mul", {x, x})})});
  c.set_din(
      0, c.op("Mul", {c.dout(0), c.op("Mul", {e, c.scalar(2.0 * std::numbers::inv_sqrtpi, x)})}));
}

// d gelu(x) = dy * (Phi(x) + x phi(x))  (approximate="none");
// tanh form: dy * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)), t = tanh(k (x + c x^3))
void gelu_grad(GradContext& c) {
  Value* x = c.in(0);
  std::string approx = c.node().attr_string("approximate", "none");
  Value* x2 = c.op("Mul", {x, x});
  Value* d = nullptr;
  if (approx == "none") {
    Value* erf = c.op("Erf", {c.op("Mul", {x, c.scalar(1.0 / std::numbers::sqrt2, x)})});
    Value* cdf = c.op("Mul", {c.op("Add", {erf, c.scalar(1.0, x)}), c.scalar(0.5, x)});
    Value* pdf = c.op("Mul", {c.op("Exp", {c.op("Mul", {x2, c.scalar(-0.5, x)})}),
                              c.scalar(std::numbers::inv_sqrtpi / std::numbers::sqrt2, x)});
    d = c.op("Add", {cdf, c.op("Mul", {x, pdf})});
  } else if (approx == "tanh") {
    Value* inner = c.op(
        "Mul", {x, c.op("Add", {c.scalar(1.0, x), c.op("Mul", {x2, c.scalar(kGeluTanhCubic, x)})})});
    Value* t = c.op("Tanh", {c.op("Mul", {inner, c.scalar(kGeluTanhScale, x)})});
    Value* left = c.op("Mul", {c.op("Add", {t, c.scalar(1.0, x)}), c.scalar(0.5, x)});
    Value* slope = c.op("Add", {c.scalar(kGeluTanhScale, x),
                                c.op("Mul", {x2, c.scalar(3 * kGeluTanhCubic * kGeluTanhScale, x)})});
    Value* sech2 = one_minus(c, c.op("Mul", {t, t}), x);
    Value* right = c.op("Mul", {c.op("Mul", {c.op("Mul", {x, sech2}), slope}), c.scalar(0.5, x)});
    d = c.op("Add", {left, right});
  } else {
    ONYX_THROW("{}: attribute approximate must be 'none' or 'tanh', found '{}'", c.label(), approx);
  }
  c.set_din(0, c.op("Mul", {c.dout(0), d}));
}

// d softplus(x) = dy * sigmoid(x)
void softplus_grad(GradContext& c) {
  c.set_din(0, c.op("Mul", {c.dout(0), c.op("Sigmoid", {c.in(0)})}));
}

/// The single axis of Softmax/LogSoftmax (opset >= 13 semantics; default -1) as a 1-D input.
Value* softmax_axis(GradContext& c) { return c.ints({c.node().attr_int("axis", -1)}); }

// d softmax(x) = y * (dy - sum(dy * y, axis))
void softmax_grad(GradContext& c) {
  Value* y = c.out(0);
  Value* dy = c.dout(0);
  Value* s = c.op("ReduceSum", {c.op("Mul", {dy, y}), softmax_axis(c)}, {Attribute::of_int("keepdims", 1)});
  c.set_din(0, c.op("Mul", {y, c.op("Sub", {dy, s})}));
}

// d log_softmax(x) = dy - exp(y) * sum(dy, axis)
void log_softmax_grad(GradContext& c) {
  Value* dy = c.dout(0);
  Value* s = c.op("ReduceSum", {dy, softmax_axis(c)}, {Attribute::of_int("keepdims", 1)});
  c.set_din(0, c.op("Sub", {dy, c.op("Mul", {c.op("Exp", {c.out(0)}), s})}));
}

// d hard_sigmoid(x) = dy * alpha * [0 < y < 1]
void hard_sigmoid_grad(GradContext& c) {
  Value* y = c.out(0);
  double alpha = attr_as_kernel(c, "alpha", 0.2f);
  Value* inside =
      c.op("And", {c.op("Greater", {y, c.scalar(0.0, y)}), c.op("Less", {y, c.scalar(1.0, y)})});
  c.set_din(0, select(c, inside, c.op("Mul", {c.dout(0), c.scalar(alpha, y)}), c.scalar(0.0, y)));
}

// d elu(x) = dy * (x >= 0 ? 1 : y + alpha)
void elu_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* dy = c.dout(0);
  double alpha = attr_as_kernel(c, "alpha", 1.0f);
  Value* pos = c.op("GreaterOrEqual", {x, c.scalar(0.0, x)});
  Value* neg = c.op("Mul", {dy, c.op("Add", {c.out(0), c.scalar(alpha, x)})});
  c.set_din(0, select(c, pos, dy, neg));
}

// d selu(x) = dy * (x > 0 ? gamma : y + gamma * alpha)
void selu_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* dy = c.dout(0);
  // The kernel computes in float-rounded constants; use the same ones.
  double alpha = attr_as_kernel(c, "alpha", 1.67326319217681884765625f);
  double gamma = attr_as_kernel(c, "gamma", 1.05070102214813232421875f);
  Value* pos = c.op("Greater", {x, c.scalar(0.0, x)});
  Value* neg = c.op("Mul", {dy, c.op("Add", {c.out(0), c.scalar(gamma * alpha, x)})});
  c.set_din(0, select(c, pos, c.op("Mul", {dy, c.scalar(gamma, x)}), neg));
}

// d hard_swish(x) = dy * (x < -3 ? 0 : x > 3 ? 1 : x/3 + 1/2)
void hard_swish_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  Value* mid = c.op("Add", {c.op("Div", {x, c.scalar(3.0, x)}), c.scalar(0.5, x)});
  Value* d = select(c, c.op("Less", {x, c.scalar(-3.0, x)}), c.scalar(0.0, x),
                    select(c, c.op("Greater", {x, c.scalar(3.0, x)}), c.scalar(1.0, x), mid));
  c.set_din(0, c.op("Mul", {dy, d}));
}

// d mish(x) = dy * (t + x * (1 - t^2) * sigmoid(x)), t = tanh(softplus(x))
void mish_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* t = c.op("Tanh", {c.op("Softplus", {x})});
  Value* sech2 = one_minus(c, c.op("Mul", {t, t}), x);
  Value* d = c.op("Add", {t, c.op("Mul", {c.op("Mul", {x, sech2}), c.op("Sigmoid", {x})})});
  c.set_din(0, c.op("Mul", {c.dout(0), d}));
}

// d prelu(x, slope) = dy * (x < 0 ? slope : 1), sum_to(dy * (x < 0 ? x : 0), slope)
void prelu_grad(GradContext& c) {
  Value *x = c.in(0), *slope = c.in(1), *dy = c.dout(0);
  Value* neg = c.op("Less", {x, c.scalar(0.0, x)});
  if (c.wants(0)) c.set_din(0, select(c, neg, c.op("Mul", {dy, slope}), dy));
  if (c.wants(1)) {
    Value* g = select(c, neg, c.op("Mul", {dy, x}), c.scalar(0.0, x));
    g->type = x->type;  // shaped like x (the output), so sum_to reduces statically
    c.set_din(1, c.sum_to(g, slope));
  }
}

// d softsign(x) = dy / (1 + |x|)^2
void softsign_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* den = c.op("Add", {c.scalar(1.0, x), c.op("Abs", {x})});
  c.set_din(0, c.op("Div", {c.dout(0), c.op("Mul", {den, den})}));
}

// d thresholded_relu(x) = dy * [x > alpha]
void thresholded_relu_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* on = c.op("Greater", {x, c.scalar(attr_as_kernel(c, "alpha", 1.0f), x)});
  c.set_din(0, select(c, on, c.dout(0), c.scalar(0.0, x)));
}

// d celu(x) = dy * (x > 0 ? 1 : exp(x / alpha))
void celu_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  double alpha = attr_as_kernel(c, "alpha", 1.0f);
  Value* e = c.op("Exp", {c.op("Div", {x, c.scalar(alpha, x)})});
  c.set_din(0, select(c, c.op("Greater", {x, c.scalar(0.0, x)}), dy, c.op("Mul", {dy, e})));
}

// d shrink(x) = dy * [|x| > lambd]
void shrink_grad(GradContext& c) {
  Value* x = c.in(0);
  double lambd = attr_as_kernel(c, "lambd", 0.5f);
  Value* out = c.op(
      "Or", {c.op("Less", {x, c.scalar(-lambd, x)}), c.op("Greater", {x, c.scalar(lambd, x)})});
  c.set_din(0, select(c, out, c.dout(0), c.scalar(0.0, x)));
}

/// swish(x) = x * sigmoid(alpha x) and its derivative s + alpha x s (1 - s), s = sigmoid(alpha x).
std::pair<Value*, Value*> swish_and_slope(GradContext& c, Value* x) {
  double alpha = attr_as_kernel(c, "alpha", 1.0f);
  Value* s = c.op("Sigmoid", {c.op("Mul", {x, c.scalar(alpha, x)})});
  Value* ax = c.op("Mul", {x, c.scalar(alpha, x)});
  Value* slope = c.op("Add", {s, c.op("Mul", {c.op("Mul", {ax, s}), one_minus(c, s, x)})});
  return {c.op("Mul", {x, s}), slope};
}

// d swish(x) = dy * (s + alpha x s (1 - s)), s = sigmoid(alpha x)
void swish_grad(GradContext& c) {
  c.set_din(0, c.op("Mul", {c.dout(0), swish_and_slope(c, c.in(0)).second}));
}

// d SwiGLU(a, b) = swish(a) * b: da = dy * b * swish'(a), db = dy * swish(a)
void swiglu_grad(GradContext& c) {
  auto [sw, slope] = swish_and_slope(c, c.in(0));
  Value* dy = c.dout(0);
  if (c.wants(0)) c.set_din(0, c.op("Mul", {c.op("Mul", {dy, c.in(1)}), slope}));
  if (c.wants(1)) c.set_din(1, c.op("Mul", {dy, sw}));
}

// d hardmax(x) = 0: the one-hot of the row maximum is piecewise constant (as PyTorch's argmax)
void hardmax_grad(GradContext& c) {
  Value* x = c.in(0);
  c.set_din(0, c.op("Expand", {c.scalar(0.0, x), c.shape_of(x)}));
}

/// The constant value of optional input i, or nullopt when it is computed at run time.
std::optional<double> const_scalar(const GradContext& c, int i) {
  const std::optional<Tensor> t = const_tensor(c.in(i));  // torch.onnx: a Constant node
  if (!t) return std::nullopt;
  ONYX_CHECK(t->numel() == 1, "{}: input {} should be a scalar but has shape {}", c.label(), i,
             shape_str(t->shape()));
  return t->to_double_vector()[0];
}

// d dropout(x) = dy * mask / (1 - ratio) in training mode (0 when ratio == 1), dy otherwise
void dropout_grad(GradContext& c) {
  Value* x = c.in(0);
  Value* dy = c.dout(0);
  // Without training_mode (or with a constant false) Dropout is the identity.
  std::optional<double> training = c.in(2) ? const_scalar(c, 2) : std::optional<double>(0.0);
  if (training && *training == 0) return c.set_din(0, dy);
  std::optional<double> ratio = c.in(1) ? const_scalar(c, 1) : std::optional<double>(0.5);
  // Ratio 0 keeps every element at scale 1 (mask all true): the identity in either mode, so
  // dy itself, with no mask for the forward to write (torch exports nn.Dropout(p=0.0), as
  // nn.TransformerEncoderLayer(dropout=0.0) has, with a constant ratio 0 in training mode).
  if (ratio && *ratio == 0) return c.set_din(0, dy);
  Value* mask = c.ensure_out(1);
  Value* scale = nullptr;
  if (ratio) {
    scale = c.scalar(*ratio < 1 ? 1.0 / (1.0 - *ratio) : 0.0, x);
  } else {
    Value* r = c.cast_like(c.in(1), x);
    Value* inv = c.op("Reciprocal", {one_minus(c, r, x)});
    scale = select(c, c.op("Less", {r, c.scalar(1.0, x)}), inv, c.scalar(0.0, x));
  }
  // A run-time training flag: in inference the mask is all ones and the scale 1.
  if (!training) {
    Value* on = c.op("Cast", {c.in(2)}, {Attribute::of_int("to", static_cast<int64_t>(DataType::Bool))});
    scale = select(c, on, scale, c.scalar(1.0, x));
  }
  c.set_din(0, select(c, mask, c.op("Mul", {dy, scale}), c.scalar(0.0, x)));
}

}  // namespace

void add_activation_rules(RuleTable& t) {
  t.add("Relu", relu_grad);
  t.add("LeakyRelu", leaky_relu_grad);
  t.add("Sigmoid", sigmoid_grad);
  t.add("Tanh", tanh_grad);
  t.add("Erf", erf_grad);
  t.add("Gelu", gelu_grad);
  t.add("Softplus", softplus_grad);
  t.add("Softmax", softmax_grad);
  t.add("LogSoftmax", log_softmax_grad);
  t.add("HardSigmoid", hard_sigmoid_grad);
  t.add("Elu", elu_grad);
  t.add("Selu", selu_grad);
  t.add("Dropout", dropout_grad);
  t.add("HardSwish", hard_swish_grad);
  t.add("Mish", mish_grad);
  t.add("PRelu", prelu_grad);
  t.add("Softsign", softsign_grad);
  t.add("ThresholdedRelu", thresholded_relu_grad);
  t.add("Celu", celu_grad);
  t.add("Shrink", shrink_grad);
  t.add("Swish", swish_grad);
  t.add("SwiGLU", swiglu_grad);
  t.add("Hardmax", hardmax_grad);
}

}  // namespace onyx::autodiff
