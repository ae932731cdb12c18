#include "graph/gelu_pattern.h"

#include <algorithm>
#include <cmath>

#include "graph/pattern_util.h"

namespace onyx {
namespace {

using pattern::is;
using pattern::private_producer;

/// x when `v` is x / sqrt 2 (Div) or x * (1 / sqrt 2) (Mul, either order), read only by `erf`.
Value* scaled_input(const Graph& g, const Value* v, const Node* erf, std::vector<Node*>& nodes) {
  Node* n = private_producer(g, v, erf);
  if (!n || n->inputs.size() != 2) return nullptr;
  Value* x = nullptr;
  if (is(n, "Div") && constant_near(g, n->inputs[1], std::sqrt(2.0))) x = n->inputs[0];
  if (is(n, "Mul"))
    for (int i = 0; i < 2 && !x; ++i)
      if (constant_near(g, n->inputs[1 - i], 1.0 / std::sqrt(2.0))) x = n->inputs[i];
  if (x) nodes.push_back(n);
  return x;
}

/// x when `v` is 1 + erf(x / sqrt 2) (Add, either order), read only by `reader`.
Value* one_plus_erf(const Graph& g, const Value* v, const Node* reader, std::vector<Node*>& nodes) {
  Node* add = private_producer(g, v, reader);
  if (!is(add, "Add") || add->inputs.size() != 2) return nullptr;
  for (int i = 0; i < 2; ++i) {
    if (!constant_near(g, add->inputs[1 - i], 1.0)) continue;
    Node* erf = private_producer(g, add->inputs[i], add);
    if (!is(erf, "Erf") || erf->inputs.size() != 1) continue;
    std::vector<Node*> found;
    if (Value* x = scaled_input(g, erf->inputs[0], erf, found)) {
      nodes.insert(nodes.end(), found.begin(), found.end());
      nodes.push_back(erf);
      nodes.push_back(add);
      return x;
    }
  }
  return nullptr;
}

}  // namespace

std::optional<double> constant_scalar(const Graph& g, const Value* v) {
  if (!v) return std::nullopt;
  const Tensor* t = nullptr;
  if (v->producer) {
    const Node* p = v->producer;
    if (is(p, "Cast") && p->inputs.size() == 1) return constant_scalar(g, p->inputs[0]);
    if (!is(p, "Constant")) return std::nullopt;
    if (const Attribute* a = p->attr("value_float")) return a->f;
    const Attribute* a = p->attr("value");
    if (!a || a->type != Attribute::Type::Tensor) return std::nullopt;
    t = &a->t;
  } else {
    if (std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end()) return std::nullopt;
    const auto& o = g.overridable_initializers;
    if (std::find(o.begin(), o.end(), v->name) != o.end()) return std::nullopt;
    t = g.initializer(v);
  }
  if (!t || t->numel() != 1 || !is_float(t->dtype())) return std::nullopt;
  return t->to_double_vector()[0];
}

bool constant_near(const Graph& g, const Value* v, double want) {
  // bfloat16 keeps 8 significant bits: a constant autocast rounded is within 2^-8 of its value.
  const std::optional<double> c = constant_scalar(g, v);
  return c && std::abs(*c - want) <= std::abs(want) / 256;
}

namespace {

/// x when `v` is x * x * x (Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x)), read only by
/// `reader`.
Value* cube(const Graph& g, const Value* v, const Node* reader, std::vector<Node*>& nodes) {
  Node* n = private_producer(g, v, reader);
  if (!n || n->inputs.size() != 2) return nullptr;
  if (is(n, "Pow") && constant_near(g, n->inputs[1], 3.0)) {
    nodes.push_back(n);
    return n->inputs[0];
  }
  if (!is(n, "Mul")) return nullptr;
  for (int i = 0; i < 2; ++i) {
    Node* sq = private_producer(g, n->inputs[i], n);
    Value* x = n->inputs[1 - i];
    if (is(sq, "Mul") && sq->inputs.size() == 2 && sq->inputs[0] == x && sq->inputs[1] == x) {
      nodes.push_back(sq);
      nodes.push_back(n);
      return x;
    }
  }
  return nullptr;
}

/// The input of a Mul read only by `reader` whose other input is the constant `c` (either
/// order), or nullptr.
Value* times_constant(const Graph& g, const Value* v, const Node* reader, double c,
                      std::vector<Node*>& nodes) {
  Node* n = private_producer(g, v, reader);
  if (!is(n, "Mul") || n->inputs.size() != 2) return nullptr;
  for (int i = 0; i < 2; ++i)
    if (constant_near(g, n->inputs[1 - i], c)) {
      nodes.push_back(n);
      return n->inputs[i];
    }
  return nullptr;
}

/// x when `v` is 1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)) (each Add and Mul in either
/// order), read only by `reader`.
Value* one_plus_tanh(const Graph& g, const Value* v, const Node* reader, std::vector<Node*>& nodes) {
  Node* add = private_producer(g, v, reader);
  if (!is(add, "Add") || add->inputs.size() != 2) return nullptr;
  for (int i = 0; i < 2; ++i) {
    if (!constant_near(g, add->inputs[1 - i], 1.0)) continue;
    Node* th = private_producer(g, add->inputs[i], add);
    if (!is(th, "Tanh") || th->inputs.size() != 1) continue;
    std::vector<Node*> found{th, add};
    Value* inner = times_constant(g, th->inputs[0], th, kGeluTanhScale, found);
    Node* sum = inner ? private_producer(g, inner, found.back()) : nullptr;
    if (!is(sum, "Add") || sum->inputs.size() != 2) continue;
    found.push_back(sum);
    for (int j = 0; j < 2; ++j) {
      std::vector<Node*> cubic = found;
      Value* x = sum->inputs[j];
      Value* c = times_constant(g, sum->inputs[1 - j], sum, kGeluTanhCubic, cubic);
      if (c && cube(g, c, cubic.back(), cubic) == x) {
        nodes.insert(nodes.end(), cubic.begin(), cubic.end());
        return x;
      }
    }
  }
  return nullptr;
}

/// y = x * 0.5 * (1 + f(x)) ending at `last`, with the three factors in any grouping and
/// order; `one_plus` recognises 1 + f(x) and returns x.
template <typename OnePlus>
std::optional<GeluSpelling> match_gelu(const Graph& g, Node* last, OnePlus&& one_plus) {
  if (!is(last, "Mul") || last->inputs.size() != 2 || last->outputs.size() != 1) return std::nullopt;
  // y = Mul(inner, c) or Mul(c, inner), inner = Mul(p, q): the factors {c, p, q} are x, 0.5 and
  // 1 + f(x) in some order.
  for (int i = 0; i < 2; ++i) {
    Node* inner = private_producer(g, last->inputs[i], last);
    if (!is(inner, "Mul") || inner->inputs.size() != 2) continue;
    Value* factors[3] = {last->inputs[1 - i], inner->inputs[0], inner->inputs[1]};
    const Node* readers[3] = {last, inner, inner};
    for (int h = 0; h < 3; ++h) {  // the 0.5
      if (!constant_near(g, factors[h], 0.5)) continue;
      for (int a = 0; a < 3; ++a) {  // 1 + f(x)
        if (a == h) continue;
        const int xi = 3 - h - a;
        std::vector<Node*> nodes;
        Value* x = one_plus(g, factors[a], readers[a], nodes);
        if (!x || x != factors[xi]) continue;
        nodes.push_back(inner);
        nodes.push_back(last);
        return GeluSpelling{x, last, std::move(nodes)};
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<GeluSpelling> match_erf_gelu(const Graph& g, Node* last) {
  return match_gelu(g, last, one_plus_erf);
}

std::optional<GeluSpelling> match_tanh_gelu(const Graph& g, Node* last) {
  return match_gelu(g, last, one_plus_tanh);
}

}  // namespace onyx
