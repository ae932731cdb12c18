// fuse_add_softmax: Softmax(Add(X, M)) along the last axis, the Add read by the Softmax alone and
// M broadcasting to X without growing it (an attention mask [batch, 1, 1, seq] or
// [1, heads, 1, seq], a position bias) -> ai.onyx AddSoftmax(X, M) (kernels/cpu/add_softmax.cpp):
// one pass over the scores instead of two and no scores-sized tensor between them, the same
// bits. Where the session's first provider lacks the kernel (CUDA) the two nodes stay.
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// True when `m` broadcasts to `x` without growing it: rank at most x's and, from the end, each
/// dim a fixed 1 or the same dim as x's (fixed, or a named symbol).
bool broadcasts_into(const Value* m, const Value* x) {
  if (!m->type.is_tensor() || !m->type.shape || !x->type.shape) return false;
  const SymShape& ms = *m->type.shape;
  const SymShape& xs = *x->type.shape;
  if (ms.size() > xs.size()) return false;
  for (size_t i = 1; i <= ms.size(); ++i) {
    const Dim& d = ms[ms.size() - i];
    const Dim& xd = xs[xs.size() - i];
    if (d.is_fixed() && d.value == 1) continue;
    if (!(d == xd) || (!d.is_fixed() && d.param.empty())) return false;
  }
  return true;
}

}  // namespace

size_t fuse_add_softmax(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  if (!runs_it.registry().find("AddSoftmax", "ai.onyx", 1, runs_it.name(), DataType::Float))
    return 0;
  const int64_t opset = model.opset("");
  struct Match {
    Node* softmax;
    Value* x;
    Value* m;
  };
  std::vector<Match> matches;
  for (const auto& owned : g.nodes()) {
    Node* s = owned.get();
    if (!is_op(s, "Softmax") || s->num_inputs() != 1 || !s->has_input(0) ||
        s->outputs.size() != 1 || !s->outputs[0])
      continue;
    Value* sum = s->inputs[0];
    const ValueType& t = sum->type;
    if (!t.is_tensor() || !t.shape || t.shape->empty() || t.elem != DataType::Float) continue;
    // Opset < 13 normalises the 2-D coercion at `axis` (default 1): the last axis alone only
    // when `axis` is the last one, as from 13 on with the default -1.
    const int64_t rank = static_cast<int64_t>(t.shape->size());
    int64_t axis = s->attr_int("axis", opset < 13 ? 1 : -1);
    if (axis < 0) axis += rank;
    if (axis != rank - 1) continue;
    Node* add = made_by(sum, "Add");
    if (!add || add->num_inputs() != 2 || !add->has_input(0) || !add->has_input(1) ||
        only_consumer(g, sum) != s)
      continue;
    for (int xi = 0; xi < 2; ++xi) {
      Value* x = add->inputs[xi];
      Value* m = add->inputs[1 - xi];
      if (x->type.elem != DataType::Float || m->type.elem != DataType::Float ||
          !provably_same_shape(x, sum) || !broadcasts_into(m, x))
        continue;
      matches.push_back({s, x, m});
      break;
    }
  }
  for (const Match& m : matches)
    replace_producer(model, m.softmax->outputs[0], "AddSoftmax", "ai.onyx", {m.x, m.m});
  return matches.size();
}

}  // namespace onyx
