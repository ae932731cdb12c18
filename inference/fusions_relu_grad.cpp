// fuse_relu_grad: training differentiates Relu (autodiff/rules_activation.cpp) as
//   dX = Where(Greater(Y, 0), dY, 0)
// in plain ONNX, so the training graph stays portable: two passes over the activation and a
// bool tensor between them (2.7 % of a torch-exported ResNet-18's training step at 1 thread).
// -> ai.onyx ReluGrad(dY, Y) (the CPU provider's relu_grad.cpp), one pass, the same bits.
#include <cmath>
#include <optional>

#include "graph/gelu_pattern.h"
#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

/// True when `v` is a constant scalar (graph/gelu_pattern.h) exactly +0, or -0 too with
/// `either_sign` (Greater cannot tell them apart; Where would write the sign).
bool constant_zero(const Graph& g, const Value* v, bool either_sign) {
  const std::optional<double> x = constant_scalar(g, v);
  return x && *x == 0.0 && (either_sign || !std::signbit(*x));
}

struct ReluGradMatch {
  Node* where;
  Value* dy;
  Value* y;
};

/// Where(Greater(y, 0), dy, +0) with the Greater read by this Where alone, y and dy of one float
/// dtype and one shape (so the Where does not broadcast).
std::optional<ReluGradMatch> match_relu_grad(const Graph& g, Node* n) {
  if (!is_op(n, "Where") || n->inputs.size() != 3 || n->outputs.size() != 1) return std::nullopt;
  Value *cond = n->inputs[0], *dy = n->inputs[1];
  if (!cond || !dy || !constant_zero(g, n->inputs[2], false)) return std::nullopt;
  Node* gt = cond->producer;
  if (!is_op(gt, "Greater") || gt->inputs.size() != 2 || only_consumer(g, cond) != n)
    return std::nullopt;
  Value* y = gt->inputs[0];
  if (!y || !constant_zero(g, gt->inputs[1], true)) return std::nullopt;
  if (!provably_same_shape(y, dy) || y->type.elem != dy->type.elem || !is_float(y->type.elem))
    return std::nullopt;
  return ReluGradMatch{n, dy, y};
}

}  // namespace

size_t fuse_relu_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  std::vector<ReluGradMatch> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_relu_grad(g, n.get())) {
      // Only for a provider with the kernel: elsewhere (CUDA) the two nodes stay on the device.
      if (runs_it.registry().find("ReluGrad", "ai.onyx", 1, runs_it.name(), m->y->type.elem))
        matches.push_back(*m);
    }
  for (const ReluGradMatch& m : matches)
    replace_producer(model, m.where->outputs[0], "ReluGrad", "ai.onyx", {m.dy, m.y});
  return matches.size();
}

}  // namespace onyx
