// fuse_cast_into_gemm: mixed precision differentiates a weight's Cast to 16 bits by casting its
// gradient back (graph/autocast.h), so the weight gradient of a linear layer is
//   Cast(Gemm(dY, X, transA = 1), to = FLOAT)
// a 16-bit product written, then read and widened into a float32 tensor of the weight's size
// (BERT-small in bf16: 3.5 ms of a 250 ms step; the MLP: 0.15 of 1.4 ms). -> ai.onyx GemmCast
// (kernels/cpu/matmul.cpp), whose oneDNN primitive writes its float32 accumulator directly:
// one pass fewer and one rounding fewer.
#include <optional>

#include "graph/shape_inference.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

struct GemmCastMatch {
  Node* gemm;
  Node* cast;
};

/// Cast(to = FLOAT) of a Gemm without C whose 16-bit output the Cast alone reads; with
/// `any_type`, of any (or an unknown) output type.
std::optional<GemmCastMatch> match_gemm_cast(const Graph& g, Node* cast, bool any_type = false) {
  if (!is_op(cast, "Cast") || cast->inputs.size() != 1 || cast->outputs.size() != 1 ||
      !cast->outputs[0] || cast->attr_int("to", 0) != static_cast<int64_t>(DataType::Float))
    return std::nullopt;
  Node* gemm = made_by(cast->inputs[0], "Gemm");
  if (!gemm || gemm->outputs.size() != 1 || gemm->has_input(2) || gemm->inputs.size() < 2 ||
      only_consumer(g, cast->inputs[0]) != cast)
    return std::nullopt;
  const DataType dt = cast->inputs[0]->type.elem;
  if (!any_type && dt != DataType::BFloat16 && dt != DataType::Float16) return std::nullopt;
  return GemmCastMatch{gemm, cast};
}

}  // namespace

size_t fuse_cast_into_gemm(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  // Training graphs arrive typed; a session's graph read from a file may not be yet (partitioning
  // infers the types later): type it here, and only when the pattern is there.
  bool untyped = false;
  for (const auto& n : g.nodes())
    if (auto m = match_gemm_cast(g, n.get(), true))
      untyped = untyped || m->cast->inputs[0]->type.elem == DataType::Undefined;
  if (untyped) infer_types_and_shapes(model);
  std::vector<GemmCastMatch> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_gemm_cast(g, n.get())) {
      // Only for a provider with the kernel: elsewhere (CUDA) the two nodes stay on the device.
      if (runs_it.registry().find("GemmCast", "ai.onyx", 1, runs_it.name(),
                                  m->cast->inputs[0]->type.elem))
        matches.push_back(*m);
    }
  for (const GemmCastMatch& m : matches) {
    Value* out = m.cast->outputs[0];
    std::vector<Value*> operands{m.gemm->inputs[0], m.gemm->inputs[1]};
    std::map<std::string, Attribute> attrs;
    for (const char* name : {"alpha", "transA", "transB"})
      if (auto it = m.gemm->attrs.find(name); it != m.gemm->attrs.end()) attrs.emplace(*it);
    const std::string name = m.gemm->name + "_cast";
    g.remove_node(m.cast);
    g.remove_node(m.gemm);
    Node* fused = g.add_node("GemmCast", operands, {out}, "ai.onyx", name);
    fused->attrs = std::move(attrs);
    fused->attrs["to"] = Attribute::of_int("to", static_cast<int64_t>(DataType::Float));
  }
  if (!matches.empty()) import_domain(model, "ai.onyx");
  return matches.size();
}

}  // namespace onyx
