// GELU fusions, for inference and for training graphs.
//
// fuse_gelu: exporters write GELU as five elementwise nodes (graph/gelu_pattern.h), five
// passes over the activation where one suffices -> com.microsoft Gelu(x); the tanh form (nine
// nodes) -> com.microsoft FastGelu(x).
//
// fuse_gelu_grad: training differentiates such a spelling (and a Gelu op) with the Gelu rule
// (autodiff/rules_activation.cpp), which writes dX as plain ONNX nodes so the training graph
// stays portable:
//   x2 = Mul(x, x)                       cdf = Mul(Add(Erf(Mul(x, 1/sqrt2)), 1), 0.5)
//   pdf = Mul(Exp(Mul(x2, -0.5)), 1/sqrt(2 pi))
//   dX = Mul(dY, Add(cdf, Mul(x, pdf)))
// -> ai.onyx GeluGrad(dY, x) (the CPU provider's gelu_grad.cpp), one pass instead of ten. The
// tanh form's rule (approximate="tanh": GPT-2's gelu_new, differentiated as one unit too):
//   x2 = Mul(x, x)          t = Tanh(Mul(Mul(x, Add(1, Mul(x2, c))), k))
//   left = Mul(Add(t, 1), 0.5)        slope = Add(k, Mul(x2, 3ck))
//   right = Mul(Mul(Mul(x, Sub(1, Mul(t, t))), slope), 0.5)
//   dX = Mul(dY, Add(left, right))
// -> GeluGrad(dY, x) with approximate="tanh", one pass instead of sixteen. The match starts at
// each outer Mul and checks every edge; every intermediate must be read inside.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "graph/gelu_pattern.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// The node producing v when it is `op` with `arity` inputs and v is read by `reader` alone.
Node* private_op(const Graph& g, const Value* v, const Node* reader, const char* op,
                 size_t arity = 2) {
  if (!v || !v->producer || only_consumer(g, v) != reader) return nullptr;
  Node* n = v->producer;
  return is_op(n, op) && n->inputs.size() == arity ? n : nullptr;
}

/// Mul(a, c) with a scalar constant c near `want`: a, else nullptr.
Value* times_constant(const Graph& g, const Node* mul, double want) {
  return mul && constant_near(g, mul->inputs[1], want) ? mul->inputs[0] : nullptr;
}

struct GradMatch {
  Node* out;
  Value* dy;
  Value* x;
  bool tanh = false;
};

/// Mul(c, a) or Add(c, a) etc. with the scalar constant c near `want` first: a, else nullptr.
Value* after_constant(const Graph& g, const Node* n, double want) {
  return n && constant_near(g, n->inputs[0], want) ? n->inputs[1] : nullptr;
}

/// True when every reader of v is one of `readers` and v is no graph output.
bool read_only_by(const Graph& g, const Value* v, std::initializer_list<const Node*> readers) {
  if (!v || is_graph_output(g, v)) return false;
  for (const auto& [reader, idx] : v->consumers)
    if (std::find(readers.begin(), readers.end(), reader) == readers.end()) return false;
  return true;
}

/// The tanh form's gradient (see the top) ending at `out` = Mul(dY, Add(left, right)).
std::optional<GradMatch> match_gelu_tanh_grad(const Graph& g, Node* out) {
  if (!is_op(out, "Mul") || out->inputs.size() != 2) return std::nullopt;
  Node* d = private_op(g, out->inputs[1], out, "Add");
  if (!d) return std::nullopt;
  // left = Mul(Add(t, 1), 0.5), t = Tanh(Mul(Mul(x, Add(1, Mul(x2, c))), k))
  Node* left = private_op(g, d->inputs[0], d, "Mul");
  Node* t_plus = left ? private_op(g, times_constant(g, left, 0.5), left, "Add") : nullptr;
  if (!t_plus || !constant_near(g, t_plus->inputs[1], 1.0)) return std::nullopt;
  Value* t = t_plus->inputs[0];
  Node* tanh = t && t->producer && is_op(t->producer, "Tanh") ? t->producer : nullptr;
  Node* scaled = tanh ? private_op(g, tanh->inputs[0], tanh, "Mul") : nullptr;
  Node* inner = scaled ? private_op(g, times_constant(g, scaled, kGeluTanhScale), scaled, "Mul") : nullptr;
  Node* one_plus = inner ? private_op(g, inner->inputs[1], inner, "Add") : nullptr;
  Node* cube = one_plus ? private_op(g, after_constant(g, one_plus, 1.0), one_plus, "Mul") : nullptr;
  Value* x2 = cube ? times_constant(g, cube, kGeluTanhCubic) : nullptr;
  Node* sq = x2 && x2->producer && is_op(x2->producer, "Mul") ? x2->producer : nullptr;
  Value* x = inner ? inner->inputs[0] : nullptr;
  if (!sq || !x || sq->inputs[0] != x || sq->inputs[1] != x) return std::nullopt;
  // right = Mul(Mul(Mul(x, Sub(1, Mul(t, t))), Add(k, Mul(x2, 3ck))), 0.5)
  Node* right = private_op(g, d->inputs[1], d, "Mul");
  Node* prod = right ? private_op(g, times_constant(g, right, 0.5), right, "Mul") : nullptr;
  Node* xs = prod ? private_op(g, prod->inputs[0], prod, "Mul") : nullptr;
  Node* slope = prod ? private_op(g, prod->inputs[1], prod, "Add") : nullptr;
  Node* sech2 = xs && xs->inputs[0] == x ? private_op(g, xs->inputs[1], xs, "Sub") : nullptr;
  Node* tt = sech2 ? private_op(g, after_constant(g, sech2, 1.0), sech2, "Mul") : nullptr;
  Node* x2s = slope ? private_op(g, after_constant(g, slope, kGeluTanhScale), slope, "Mul") : nullptr;
  if (!tt || tt->inputs[0] != t || tt->inputs[1] != t || !x2s || x2s->inputs[0] != x2 ||
      !constant_near(g, x2s->inputs[1], 3 * kGeluTanhCubic * kGeluTanhScale))
    return std::nullopt;
  // The two values read twice inside: t (by its Add and its square) and x2 (by both Muls).
  if (!read_only_by(g, t, {t_plus, tt}) || !read_only_by(g, x2, {cube, x2s})) return std::nullopt;
  return GradMatch{out, out->inputs[0], x, true};
}

std::optional<GradMatch> match_gelu_grad(const Graph& g, Node* out) {
  if (!is_op(out, "Mul") || out->inputs.size() != 2) return std::nullopt;
  Node* d = private_op(g, out->inputs[1], out, "Add");
  if (!d) return std::nullopt;
  // cdf = Mul(Add(Erf(Mul(x, 1/sqrt2)), 1), 0.5)
  Node* cdf = private_op(g, d->inputs[0], d, "Mul");
  Node* one_plus = cdf ? private_op(g, times_constant(g, cdf, 0.5), cdf, "Add") : nullptr;
  if (!one_plus || !constant_near(g, one_plus->inputs[1], 1.0)) return std::nullopt;
  Node* erf = private_op(g, one_plus->inputs[0], one_plus, "Erf", 1);
  Node* scaled = erf ? private_op(g, erf->inputs[0], erf, "Mul") : nullptr;
  Value* x = times_constant(g, scaled, 1.0 / std::numbers::sqrt2);
  if (!x) return std::nullopt;
  // Mul(x, pdf), pdf = Mul(Exp(Mul(Mul(x, x), -0.5)), 1/sqrt(2 pi))
  Node* xp = private_op(g, d->inputs[1], d, "Mul");
  if (!xp || xp->inputs[0] != x) return std::nullopt;
  Node* pdf = private_op(g, xp->inputs[1], xp, "Mul");
  Node* ex = pdf ? private_op(g, times_constant(g, pdf, std::numbers::inv_sqrtpi / std::numbers::sqrt2),
                              pdf, "Exp", 1)
                 : nullptr;
  Node* half_sq = ex ? private_op(g, ex->inputs[0], ex, "Mul") : nullptr;
  Node* sq = half_sq ? private_op(g, times_constant(g, half_sq, -0.5), half_sq, "Mul") : nullptr;
  if (!sq || sq->inputs[0] != x || sq->inputs[1] != x) return std::nullopt;
  return GradMatch{out, out->inputs[0], x};
}

}  // namespace

size_t fuse_gelu(Model& model, bool tanh_form) {
  Graph& g = *model.graph;
  std::vector<GeluSpelling> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_erf_gelu(g, n.get())) matches.push_back(*m);
  for (const GeluSpelling& m : matches)
    replace_producer(model, m.last->outputs[0], "Gelu", "com.microsoft", {m.x});
  std::vector<GeluSpelling> tanh_matches;
  for (const auto& n : g.nodes())
    if (auto m = tanh_form ? match_tanh_gelu(g, n.get()) : std::nullopt) tanh_matches.push_back(*m);
  for (const GeluSpelling& m : tanh_matches)
    replace_producer(model, m.last->outputs[0], "FastGelu", "com.microsoft", {m.x});
  // The spellings' other nodes now have no readers; eliminate_dead_code removes them.
  return matches.size() + tanh_matches.size();
}

size_t fuse_gelu_grad(Model& model) {
  Graph& g = *model.graph;
  std::vector<GradMatch> matches;
  for (const auto& n : g.nodes()) {
    if (auto m = match_gelu_grad(g, n.get())) matches.push_back(*m);
    else if (auto mt = match_gelu_tanh_grad(g, n.get())) matches.push_back(*mt);
  }
  for (const GradMatch& m : matches) {
    Node* f = replace_producer(model, m.out->outputs[0], "GeluGrad", "ai.onyx", {m.dy, m.x});
    if (m.tanh) f->attrs["approximate"] = Attribute::of_string("approximate", "tanh");
  }
  return matches.size();
}

}  // namespace onyx
