// fuse_max_pool_grad: training differentiates MaxPool (autodiff/rules_nn.cpp) as
//   ScatterElements(Expand(0, S), Reshape(Indices, [-1]), Reshape(dY, [-1]), axis=0, reduction=add)
// in plain ONNX, so the training graph stays portable: a zero tensor of X's size filled, copied
// and scattered into on one thread. -> ai.onyx MaxPoolGrad(dY, Indices, S) (the CPU provider's
// max_pool_grad.cpp), one pass per (n, c) plane, planes in parallel, the same bits.
#include <algorithm>
#include <cmath>
#include <optional>

#include "graph/gelu_pattern.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

struct MaxPoolGradMatch {
  Node* scatter;
  Value* dy;       // before its flattening Reshape
  Value* indices;  // MaxPool's second output
  Value* size;     // the Expand's shape: [numel(X)]; nullptr when the zeros were folded
  int64_t folded_numel = 0;  // with size nullptr: the folded zeros' length
};

/// Reshape(v, [-1]) read by `reader` alone: v, else nullptr.
Value* flattened(const Graph& g, Value* r, const Node* reader) {
  Node* n = made_by(r, "Reshape");
  if (!n || n->inputs.size() != 2 || !n->inputs[0] || only_consumer(g, r) != reader) return nullptr;
  const auto shape = constant_ints(g, n->inputs[1]);
  return shape && shape->size() == 1 && (*shape)[0] == -1 ? n->inputs[0] : nullptr;
}

std::optional<MaxPoolGradMatch> match_max_pool_grad(const Graph& g, Node* n) {
  if (!is_op(n, "ScatterElements") || n->inputs.size() != 3 || n->outputs.size() != 1 ||
      n->attr_int("axis", 0) != 0 || n->attr_string("reduction", "none") != "add")
    return std::nullopt;
  // data: a zero scalar expanded (or those zeros folded into a 1-D constant), read here alone.
  const std::optional<ZeroFill> zeros = zero_fill(g, n->inputs[0]);
  if (!zeros || only_consumer(g, n->inputs[0]) != n || (!zeros->shape && zeros->dims.size() != 1))
    return std::nullopt;
  Value* size = zeros->shape;
  const int64_t folded = size ? 0 : zeros->dims[0];
  // indices: MaxPool's Indices (row-major: storage_order 0), flattened.
  Value* indices = flattened(g, n->inputs[1], n);
  Node* pool = indices ? indices->producer : nullptr;
  if (!is_op(pool, "MaxPool") || pool->outputs.size() < 2 || pool->outputs[1] != indices ||
      pool->attr_int("storage_order", 0) != 0)
    return std::nullopt;
  // updates: dY flattened, of the pooled output's shape where both are known.
  Value* dy = flattened(g, n->inputs[2], n);
  if (!dy || !dy->type.is_tensor() || !is_float(dy->type.elem)) return std::nullopt;
  const ValueType &yt = pool->outputs[0]->type, &it = indices->type;
  if (!it.is_tensor() || !it.shape || it.shape->size() < 3) return std::nullopt;
  if (dy->type.shape && yt.is_tensor() && yt.shape && *dy->type.shape != *yt.shape)
    return std::nullopt;
  return MaxPoolGradMatch{n, dy, indices, size, folded};
}

}  // namespace

size_t fuse_max_pool_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  std::vector<MaxPoolGradMatch> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_max_pool_grad(g, n.get())) {
      // Only for a provider with the kernel: elsewhere the plain nodes stay where they run.
      if (runs_it.registry().find("MaxPoolGrad", "ai.onyx", 1, runs_it.name(), m->dy->type.elem))
        matches.push_back(*m);
    }
  for (const MaxPoolGradMatch& m : matches) {
    Value* size = m.size;
    if (!size) {
      size = g.add_unique_value(m.scatter->name + "_size");
      g.add_initializer(size->name, Tensor::from_vector<int64_t>({1}, {m.folded_numel}));
    }
    replace_producer(model, m.scatter->outputs[0], "MaxPoolGrad", "ai.onyx", {m.dy, m.indices, size});
  }
  return matches.size();
}

}  // namespace onyx
