// MatMul fusion: a Transpose of the last two axes folded into com.microsoft FusedMatMul, which
// reads the operand transposed in place (same math, up to reassociation inside one kernel).
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// True when `t` is a Transpose that swaps exactly the last two axes of its input.
bool swaps_last_two_axes(const Node& t) {
  if (t.op_type != "Transpose" || !t.domain.empty() || !t.has_input(0)) return false;
  std::vector<int64_t> perm = t.attr_ints("perm");
  if (perm.empty()) {  // the default reverses every axis: a swap of the last two only for rank 2
    const ValueType& in = t.inputs[0]->type;
    return in.is_tensor() && in.shape && in.shape->size() == 2;
  }
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r - 2; ++i)
    if (perm[i] != i) return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

}  // namespace

size_t fuse_transpose_into_matmul(Model& model) {
  Graph& g = *model.graph;
  size_t fused = 0;
  for (Node* n : g.topological_order()) {
    if (n->op_type != "MatMul" || !n->domain.empty() || n->num_inputs() != 2) continue;
    bool trans[2] = {false, false};
    for (int i = 0; i < 2; ++i) {
      const Value* v = n->inputs[i];
      if (!v || !v->producer || !swaps_last_two_axes(*v->producer)) continue;
      // A 1-D operand has nothing to transpose; the Transpose's rank is >= 2 by the checks above.
      g.set_input(n, i, v->producer->inputs[0]);
      trans[i] = true;
    }
    if (!trans[0] && !trans[1]) continue;
    // ONNX Runtime's contrib op; ours also takes MatMul's integer types.
    n->op_type = "FusedMatMul";
    n->domain = "com.microsoft";
    n->attrs["transA"] = Attribute::of_int("transA", trans[0] ? 1 : 0);
    n->attrs["transB"] = Attribute::of_int("transB", trans[1] ? 1 : 0);
    ++fused;
  }
  if (fused) import_domain(model, "com.microsoft");
  return fused;
}

}  // namespace onyx
