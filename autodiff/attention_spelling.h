// Training through an attention spelling (graph/attention_pattern.h) as one unit: its backward
// is written once, in plain ONNX ops, in the form inference/fusions_attention_grad.cpp runs as
// one kernel. Not installed: the builder's (training_graph.cpp) own helper.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <vector>

#include "graph/attention_pattern.h"
#include "graph/ir.h"

namespace onyx::autodiff {

struct AttentionSpellings {
  std::map<Node*, AttentionSpelling> by_last;
  std::set<Node*> inside;  // the spellings' nodes but their last
};

/// The spellings among `order` through which a gradient flows to Q, Kt or V while the mask and
/// the scale factors need none (`needs_grad`); nodes already in `taken` (other spellings) are
/// left out.
AttentionSpellings find_attention_spellings(const Model& model, const Graph& g,
                                            const std::vector<Node*>& order,
                                            const std::function<bool(const Value*)>& needs_grad,
                                            const std::set<Node*>& taken);

/// The gradients of Q, Kt and V through spelling `m` for the gradient `dy` of its output; one
/// is nullptr where `wants` (q, kt, v) says no. Appends to `g`:
///   dV  = MatMul(Transpose(P), dy)
///   dP  = MatMul(dy, Transpose(V))
///   dX  = Mul(Sub(dP, ReduceSum(Mul(dP, P), last axis, keepdims)), P)   (Softmax's gradient)
///   dXa = Mul(dX, alpha)          alpha = c1 * c2 * c (or / c); absent without factors
///   dQ  = MatMul(dXa, Transpose(Kt)),  dKt = MatMul(Transpose(Q), dXa)
/// with Transpose swapping the last two axes.
std::vector<Value*> attention_spelling_grad(const Model& model, Graph& g, const AttentionSpelling& m,
                                            Value* dy, const std::vector<bool>& wants);

}  // namespace onyx::autodiff
