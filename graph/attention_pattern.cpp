#include "graph/attention_pattern.h"

#include <algorithm>

namespace onyx {
namespace {

bool is(const Node* n, const char* op) { return n && n->op_type == op && n->domain.empty(); }

/// The node producing v, when v is read by `reader` only and is not a graph output.
Node* private_producer(const Graph& g, const Value* v, const Node* reader) {
  if (!v || !v->producer || v->consumers.size() != 1 || v->consumers[0].first != reader)
    return nullptr;
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) return nullptr;
  return v->producer;
}

const SymShape* shape_of(const Value* v) {
  return v && v->type.is_tensor() && v->type.shape ? &*v->type.shape : nullptr;
}

/// A tensor of `dt` known to hold one element ([] or [1, ...]).
bool one_element(const Value* v, DataType dt) {
  const SymShape* s = shape_of(v);
  if (!s || v->type.elem != dt) return false;
  return std::all_of(s->begin(), s->end(), [](const Dim& d) { return d.is_fixed() && d.value == 1; });
}

/// x when `v` is x * c (either order) with c one element, read only by `reader`; else v itself.
Value* unscaled(const Graph& g, Value* v, const Node* reader, DataType dt, AttentionSpelling& m) {
  Node* n = private_producer(g, v, reader);
  if (!is(n, "Mul") || n->inputs.size() != 2) return v;
  for (int i = 0; i < 2; ++i) {
    Value* x = n->inputs[i];
    const SymShape* xs = shape_of(x);
    if (one_element(n->inputs[1 - i], dt) && xs && xs->size() >= 2) {
      m.factors.push_back({n->inputs[1 - i], false});
      m.nodes.push_back(n);
      return x;
    }
  }
  return v;
}

}  // namespace

bool same_dim(const Dim& a, const Dim& b) {
  if (a.is_fixed() || b.is_fixed()) return a.value == b.value;
  return !a.param.empty() && a.param == b.param;
}

std::optional<AttentionSpelling> match_attention(const Graph& g, Node* last, int64_t opset) {
  if (!is(last, "MatMul") || last->inputs.size() != 2 || last->outputs.size() != 1) return std::nullopt;
  AttentionSpelling m;
  m.last = last;
  m.v = last->inputs[1];
  m.p = last->inputs[0];
  Node* sm = private_producer(g, m.p, last);
  if (!is(sm, "Softmax") || sm->inputs.size() != 1) return std::nullopt;
  const SymShape* ps = shape_of(m.p);
  if (!ps || ps->size() < 2) return std::nullopt;
  const auto rank = static_cast<int64_t>(ps->size());
  int64_t axis = sm->attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis != rank - 1) return std::nullopt;
  const DataType dt = m.p->type.elem;
  if (!is_float(dt)) return std::nullopt;
  m.nodes = {last, sm};

  Value* x = sm->inputs[0];
  Node* n = private_producer(g, x, sm);
  // Scores + mask (either order): the scores are the operand of the probabilities' shape.
  if (is(n, "Add") && n->inputs.size() == 2) {
    for (int i = 0; i < 2 && !m.mask; ++i) {
      const SymShape* s = shape_of(n->inputs[i]);
      if (s && s->size() == ps->size() &&
          std::equal(s->begin(), s->end(), ps->begin(), ps->end(), same_dim) &&
          n->inputs[i]->producer) {
        Node* inner = private_producer(g, n->inputs[i], n);
        if (is(inner, "MatMul") || is(inner, "Div") || is(inner, "Mul")) {
          m.mask = n->inputs[1 - i];
          m.nodes.push_back(n);
          x = n->inputs[i];
          n = inner;
        }
      }
    }
    if (!m.mask) return std::nullopt;
  }
  // The scores' own scale.
  if ((is(n, "Div") || is(n, "Mul")) && n->inputs.size() == 2) {
    const bool div = is(n, "Div");
    int scores = -1;
    for (int i = 0; i < (div ? 1 : 2) && scores < 0; ++i)
      if (one_element(n->inputs[1 - i], dt) && is(private_producer(g, n->inputs[i], n), "MatMul"))
        scores = i;
    if (scores < 0) return std::nullopt;
    m.factors.push_back({n->inputs[1 - scores], div});
    m.nodes.push_back(n);
    x = n->inputs[scores];
    n = private_producer(g, x, n);
  }
  if (!is(n, "MatMul") || n->inputs.size() != 2) return std::nullopt;
  m.nodes.push_back(n);
  m.q = unscaled(g, n->inputs[0], n, dt, m);
  m.kt = unscaled(g, n->inputs[1], n, dt, m);
  // One rank, equal batch dims, matching inner dims: the products broadcast nothing.
  for (const Value* v : {m.q, m.kt, m.v}) {
    const SymShape* s = shape_of(v);
    if (!s || s->size() != ps->size() || v->type.elem != dt) return std::nullopt;
    for (int64_t i = 0; i + 2 < rank; ++i)
      if (!same_dim((*s)[i], (*ps)[i])) return std::nullopt;
  }
  const SymShape &qs = *shape_of(m.q), &ks = *shape_of(m.kt), &vs = *shape_of(m.v);
  if (!same_dim(qs[rank - 1], ks[rank - 2]) || !same_dim(qs[rank - 2], (*ps)[rank - 2]) ||
      !same_dim(ks[rank - 1], (*ps)[rank - 1]) || !same_dim(vs[rank - 2], (*ps)[rank - 1]))
    return std::nullopt;
  return m;
}

}  // namespace onyx
