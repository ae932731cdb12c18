// fuse_softmax_attention_grad: training differentiates an attention spelling as one unit
// (autodiff/attention_spelling.cpp), writing its backward as plain ONNX nodes:
//   dV  = MatMul(Transpose(P), dO)                      (when V needs a gradient)
//   dP  = MatMul(dO, Transpose(V))
//   dX  = Mul(Sub(dP, ReduceSum(Mul(dP, P), last axis, keepdims)), P)
//   dX  = Where(cond, dX, 0) or Where(cond, 0, dX)      (when a Where filled masked scores)
//   dXa = Mul(dX, alpha)                                (when the scores were scaled)
//   dQ  = MatMul(dXa, Transpose(Kt)),  dKt = MatMul(Transpose(Q), dXa)
// each Transpose swapping the last two axes. Each node is a pass over a [B, H, Sq, Skv] tensor
// through memory, and the batched products run cold; ai.onyx SoftmaxAttentionGrad(dO, P, V, Q,
// Kt, alpha, cond) -> (dQ, dKt, dV) (the CPU provider's softmax_attention_grad.cpp) works one
// (batch, head) matrix at a time in cache, broadcasting batch dims as the products do (its
// outputs have the products' shapes; a reduction to a broadcast input's shape stays after it).
// The match starts at each Sub and checks every edge; every intermediate must be read inside.
// Runs before the passes that fold the Transposes into the products.
#include <optional>

#include "graph/pattern_util.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

using pattern::shape_of;

/// The node producing v when it is `op` and v is read by `reader` alone.
Node* private_op(const Graph& g, const Value* v, const Node* reader, const char* op) {
  if (!v || !v->producer || only_consumer(g, v) != reader) return nullptr;
  return is_op(v->producer, op) ? v->producer : nullptr;
}

/// x when `t` (read by `reader` alone) is Transpose(x) swapping the last two axes.
Value* swapped_input(const Graph& g, const Value* t, const Node* reader) {
  Node* n = private_op(g, t, reader, "Transpose");
  return n && swaps_last_two_axes(*n) ? n->inputs[0] : nullptr;
}

struct Match {
  Value *dout, *p, *v, *q = nullptr, *kt = nullptr, *alpha = nullptr;
  Value* cond = nullptr;    // the Where's condition, or nullptr
  bool keep_where_true = true;  // dX kept where cond holds (else where it does not)
  Node* dp = nullptr;                                 // dO V^T
  Node *dq = nullptr, *dk = nullptr, *dv = nullptr;  // the products writing the gradients
};

/// A Transpose's permutation of a rank-`rank` input (its default reverses every axis).
std::vector<int64_t> perm_of(const Node& t, int64_t rank) {
  std::vector<int64_t> p = t.attr_ints("perm");
  if (p.empty())
    for (int64_t i = rank - 1; i >= 0; --i) p.push_back(i);
  return p;
}

/// True when ReduceSum `rs` sums the last axis of a rank-`rank` tensor, keeping it.
bool sums_last_axis(const Graph& g, const Node& rs, int64_t rank) {
  if (rs.attr_int("keepdims", 1) != 1) return false;
  std::optional<std::vector<int64_t>> axes;
  if (rs.inputs.size() >= 2 && rs.inputs[1]) axes = constant_ints(g, rs.inputs[1]);
  else if (rs.has_attr("axes")) axes = rs.attr_ints("axes");
  return axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1);
}

std::optional<Match> match_at(const Graph& g, Node* sub) {
  if (!is_op(sub, "Sub") || sub->inputs.size() != 2) return std::nullopt;
  Value* dp = sub->inputs[0];
  Node* rs = private_op(g, sub->inputs[1], sub, "ReduceSum");
  Node* prod = rs ? private_op(g, rs->inputs[0], rs, "Mul") : nullptr;
  if (!prod || prod->inputs.size() != 2) return std::nullopt;
  Match m;
  m.p = other_input(prod, dp);
  if (!m.p || dp->consumers.size() != 2 || is_graph_output(g, dp)) return std::nullopt;
  const SymShape* ps = shape_of(m.p);
  if (!ps || ps->size() < 2 || m.p->type.elem != DataType::Float) return std::nullopt;
  const auto rank = static_cast<int64_t>(ps->size());
  if (!sums_last_axis(g, *rs, rank)) return std::nullopt;
  Node* mm = dp->producer;
  if (!is_op(mm, "MatMul") || mm->inputs.size() != 2) return std::nullopt;
  m.dp = mm;
  m.dout = mm->inputs[0];
  m.v = swapped_input(g, mm->inputs[1], mm);
  // dX = Mul(Sub, P), then the optional scale.
  Node* mx = only_consumer(g, sub->outputs[0]);
  if (!m.v || !is_op(mx, "Mul") || other_input(mx, sub->outputs[0]) != m.p) return std::nullopt;
  Value* dx = mx->outputs[0];
  if (Node* w = only_consumer(g, dx); is_op(w, "Where") && w->inputs.size() == 3 && !is_graph_output(g, dx)) {
    // Where(cond, dX, 0) or Where(cond, 0, dX), with a boolean cond that broadcasts to dX.
    const int at = w->inputs[1] == dx ? 1 : w->inputs[2] == dx ? 2 : 0;
    const std::optional<double> zero = at ? constant_scalar(g, w->inputs[3 - at]) : std::nullopt;
    const SymShape* cs = shape_of(w->inputs[0]);
    if (!zero || *zero != 0.0 || w->inputs[0] == dx || !cs || cs->size() > ps->size() ||
        w->inputs[0]->type.elem != DataType::Bool)
      return std::nullopt;
    m.cond = w->inputs[0];
    m.keep_where_true = at == 1;
    dx = w->outputs[0];
  }
  if (Node* ms = only_consumer(g, dx); is_op(ms, "Mul") && ms->inputs.size() == 2) {
    Value* a = other_input(ms, dx);
    if (pattern::one_element(a, DataType::Float)) {
      m.alpha = a;
      dx = ms->outputs[0];
    }
  }
  if (dx->consumers.empty() || is_graph_output(g, dx)) return std::nullopt;
  for (const auto& [reader, idx] : dx->consumers) {
    if (!is_op(reader, "MatMul") || reader->inputs.size() != 2 || idx < 0) return std::nullopt;
    if (idx == 0 && !m.dq && (m.kt = swapped_input(g, reader->inputs[1], reader))) m.dq = reader;
    else if (idx == 1 && !m.dk && (m.q = swapped_input(g, reader->inputs[0], reader))) m.dk = reader;
    else return std::nullopt;
  }
  for (const auto& [reader, idx] : m.dout->consumers)
    if (idx == 1 && is_op(reader, "MatMul") && reader->inputs.size() == 2 &&
        swapped_input(g, reader->inputs[0], reader) == m.p) {
      m.dv = reader;
      break;
    }
  // One rank, float32: the products broadcast batch dims only, as the kernel does.
  for (const Value* v : {m.dout, m.v, m.q, m.kt}) {
    if (!v) continue;
    const SymShape* s = shape_of(v);
    if (!s || s->size() != ps->size() || v->type.elem != DataType::Float) return std::nullopt;
  }
  return m;
}

}  // namespace

size_t fuse_softmax_attention_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  // Only for a provider with the kernel: elsewhere (CUDA) the plain nodes stay on it.
  if (!runs_it.registry().find("SoftmaxAttentionGrad", "ai.onyx", 1, runs_it.name(), DataType::Float))
    return 0;
  std::vector<Match> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_at(g, n.get())) matches.push_back(*m);
  for (const Match& m : matches) {
    const auto rank = static_cast<int64_t>(shape_of(m.p)->size());
    std::vector<Attribute> attrs;
    // dO read through the Transpose that made it (a head merge's gradient) when only the
    // replaced products read it and each row stays contiguous.
    Value* dout = m.dout;
    if (Node* t = dout->producer; is_op(t, "Transpose") && t->inputs.size() == 1 && !is_graph_output(g, dout)) {
      const std::vector<int64_t> perm = perm_of(*t, rank);
      bool only_ours = static_cast<int64_t>(perm.size()) == rank && perm[rank - 1] == rank - 1;
      for (const auto& [reader, idx] : dout->consumers) only_ours = only_ours && (reader == m.dp || reader == m.dv);
      if (only_ours) {
        dout = t->inputs[0];
        attrs.push_back(Attribute::of_ints("dO_perm", perm));
      }
    }
    // Each gradient written where the Transpose reading it alone (a head split's gradient)
    // would put it, when one of its two matrix axes stays last in memory.
    std::vector<Value*> outs;
    const char* names[] = {"dQ_perm", "dKt_perm", "dV_perm"};
    int i = 0;
    for (Node* n : {m.dq, m.dk, m.dv}) {
      const char* name = names[i++];
      if (!n) {
        outs.push_back(nullptr);
        continue;
      }
      Node* t = only_consumer(g, n->outputs[0]);
      const std::vector<int64_t> perm = is_op(t, "Transpose") ? perm_of(*t, rank) : std::vector<int64_t>();
      if (static_cast<int64_t>(perm.size()) == rank &&
          (perm[rank - 1] == rank - 1 || perm[rank - 1] == rank - 2)) {
        outs.push_back(t->outputs[0]);
        detach_output(g, t, 0);
        attrs.push_back(Attribute::of_ints(name, perm));
      } else {
        outs.push_back(n->outputs[0]);
        detach_output(g, n, 0);
      }
    }
    Value* named = outs[0] ? outs[0] : outs[1];
    if (m.cond) attrs.push_back(Attribute::of_int("keep_where_true", m.keep_where_true ? 1 : 0));
    std::vector<Value*> ins = {dout, m.p, m.v, m.q, m.kt, m.alpha};
    if (m.cond) ins.push_back(m.cond);
    Node* f = g.add_node("SoftmaxAttentionGrad", ins, outs, "ai.onyx", named->name + "_fused");
    for (auto& a : attrs) f->attrs[a.name] = std::move(a);
  }
  if (!matches.empty()) import_domain(model, "ai.onyx");
  // The plain nodes now have no readers; eliminate_dead_code removes them.
  return matches.size();
}

}  // namespace onyx
