// GELU as exporters spell it with Erf, recognised so that training can differentiate it as one
// op (autodiff) and execution can run it as one kernel (inference fusions):
//
//   y = x * 0.5 * (1 + erf(x / sqrt 2))
//
// and its tanh approximation (GPT-2's "gelu_new"; training differentiates it as one unit too,
// but the forward keeps its nodes there: SessionOptions::approximate_fusions):
//
//   y = x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//
// with x^3 as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x).
//
// torch.nn.GELU() through the TorchScript exporter and Hugging Face's BERT both write
//   Mul(Mul(x, Add(Erf(Div(x, 1.4142...)), 1)), 0.5)
// and other writers move the 0.5 (Mul(Mul(x, 0.5), Add(...)), Mul(x, Mul(Add(...), 0.5))) or
// multiply by 1/sqrt 2 instead of dividing. Constants are scalars (initializers, Constant
// nodes, or casts of them as autocast writes), compared with a tolerance that admits their
// bfloat16 rounding. Every node between x and y must be read only inside the spelling.
#pragma once

#include <optional>
#include <vector>

#include "graph/ir.h"

namespace onyx {

/// The tanh form's constants: sqrt(2 / pi) and the cubic term's coefficient.
inline constexpr double kGeluTanhScale = 0.7978845608028654;
inline constexpr double kGeluTanhCubic = 0.044715;

struct GeluSpelling {
  Value* x = nullptr;
  Node* last = nullptr;       // produces y
  std::vector<Node*> nodes;   // the spelling's nodes (Div or Mul, Erf, Add, two Muls)
};

/// The Erf-GELU spelling that ends at `last` (the outer Mul), or nullopt.
std::optional<GeluSpelling> match_erf_gelu(const Graph& g, Node* last);
/// The tanh-GELU spelling that ends at `last` (the outer Mul), or nullopt.
std::optional<GeluSpelling> match_tanh_gelu(const Graph& g, Node* last);

/// The scalar value of `v` when it is a constant: an initializer no feed can replace, a
/// Constant node's output, or a Cast of either; nullopt otherwise.
std::optional<double> constant_scalar(const Graph& g, const Value* v);
/// True when `v` is a constant scalar within bfloat16's rounding (2^-8, relative) of `want`.
bool constant_near(const Graph& g, const Value* v, double want);

}  // namespace onyx
