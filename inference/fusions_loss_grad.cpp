// fuse_softmax_cross_entropy_grad: training differentiates SoftmaxCrossEntropyLoss
// (autodiff/rules_loss.cpp) as
//   Mul(Sub(Exp(log_prob), Cast(Equal(Unsqueeze(labels, [1]), R))), coef)
// in plain ONNX, R the classes 0..C-1 laid along axis 1 (constant once shapes fold), so the
// training graph stays portable: five passes over the [N, C, ...] scores and a bool tensor.
// -> ai.onyx SoftmaxCrossEntropyGrad(log_prob, labels, coef) (the CPU provider's
// softmax_cross_entropy_grad.cpp), one pass, the same bits.
// fuse_softmax_cross_entropy_loss_grad then takes SoftmaxCrossEntropyLoss with that gradient
// where nothing else reads log_prob -> ai.onyx SoftmaxCrossEntropyLossGrad (loss and gradient in
// one pass over the scores; log_prob, as large as the scores, is never written).
#include <optional>
#include <unordered_set>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

struct LossGradMatch {
  Node* mul;
  Value* log_prob;
  Value* labels;
  Value* coef;
};

/// The node `v` when it is read by `reader` alone.
Node* feeding(const Graph& g, const Value* v, const Node* reader) {
  return v && v->producer && only_consumer(g, v) == reader ? v->producer : nullptr;
}

/// True when `v` is a constant holding 0, 1, ..., C-1 in order with shape [C, 1, ...] of rank
/// `rank` (the classes laid along the scores' axis 1 once the label's axis is unsqueezed).
bool constant_classes(const Graph& g, const Value* v, int64_t C, size_t rank) {
  const Tensor* t = constant_value(g, v);
  if (!t || static_cast<size_t>(t->rank()) != rank || rank == 0 || t->shape()[0] != C ||
      t->numel() != C)
    return false;
  auto in_order = [&]<typename I>(const I* v) {
    for (int64_t i = 0; i < C; ++i)
      if (v[i] != i) return false;
    return true;
  };
  if (t->dtype() == DataType::Int64) return in_order(t->data<int64_t>());
  if (t->dtype() == DataType::Int32) return in_order(t->data<int32_t>());
  return false;
}

/// Fixed dims of `v`'s inferred shape, or nullopt when one is not fixed (or the shape unknown).
std::optional<Shape> fixed_shape(const Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape) return std::nullopt;
  Shape s;
  for (const Dim& d : *v->type.shape) {
    if (!d.is_fixed()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

std::optional<LossGradMatch> match_loss_grad(const Graph& g, Node* mul) {
  if (!is_op(mul, "Mul") || mul->num_inputs() != 2 || mul->outputs.size() != 1) return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    Node* sub = feeding(g, mul->inputs[side], mul);
    Value* coef = mul->inputs[1 - side];
    if (!is_op(sub, "Sub") || sub->num_inputs() != 2 || !coef) continue;
    Node* exp = feeding(g, sub->inputs[0], sub);
    Node* cast = feeding(g, sub->inputs[1], sub);
    if (!is_op(exp, "Exp") || !exp->has_input(0) || !cast) continue;
    Value* lp = exp->inputs[0];
    const DataType dt = lp->type.elem;
    if ((dt != DataType::Float && dt != DataType::Double) || coef->type.elem != dt ||
        mul->outputs[0]->type.elem != dt)
      continue;
    const bool to_dt = (is_op(cast, "Cast") && cast->attr_int("to", 0) == static_cast<int64_t>(dt)) ||
                       (is_op(cast, "CastLike") && cast->num_inputs() == 2 && cast->inputs[1] &&
                        cast->inputs[1]->type.elem == dt);
    if (!to_dt || !cast->has_input(0)) continue;
    Node* eq = feeding(g, cast->inputs[0], cast);
    if (!is_op(eq, "Equal") || eq->num_inputs() != 2) continue;
    // The scores' shape [N, C, d...] with C fixed; the labels [N, d...] unsqueezed at 1.
    if (!lp->type.is_tensor() || !lp->type.shape || lp->type.shape->size() < 2 ||
        !(*lp->type.shape)[1].is_fixed())
      continue;
    const size_t rank = lp->type.shape->size();
    const int64_t C = (*lp->type.shape)[1].value;
    Node* unsq = made_by(eq->inputs[0], "Unsqueeze");
    if (!unsq || !unsq->has_input(0) || unsq->inputs[0]->type.elem != DataType::Int64) continue;
    const auto axes = unsq->num_inputs() > 1 ? constant_ints(g, unsq->inputs[1])
                                             : std::optional<std::vector<int64_t>>(unsq->attr_ints("axes"));
    if (!axes || *axes != std::vector<int64_t>{1}) continue;
    if (!constant_classes(g, eq->inputs[1], C, rank - 1)) continue;
    // Equal broadcasts to the scores' shape only if the labels' dims are the scores' but C.
    const ValueType& lt = unsq->inputs[0]->type;
    if (!lt.is_tensor() || !lt.shape || lt.shape->size() != rank - 1) continue;
    bool dims_match = (*lt.shape)[0] == (*lp->type.shape)[0];
    for (size_t i = 2; i < rank && dims_match; ++i) dims_match = (*lt.shape)[i - 1] == (*lp->type.shape)[i];
    if (!dims_match) continue;
    for (const Dim& d : *lt.shape)
      if (!d.is_fixed() && d.param.empty()) dims_match = false;
    if (!dims_match) continue;
    // coef: one value, or [N, 1, d...] (the kernel checks the run's shapes too).
    const std::optional<Shape> cs = fixed_shape(coef);
    const bool one = cs && shape_numel(*cs) == 1;
    bool per_position = false;
    if (!one && coef->type.shape && coef->type.shape->size() == rank) {
      per_position = (*coef->type.shape)[1].is_fixed() && (*coef->type.shape)[1].value == 1;
      for (size_t i = 0; i < rank && per_position; ++i)
        if (i != 1) per_position = (*coef->type.shape)[i] == (*lp->type.shape)[i];
    }
    if (!one && !per_position) continue;
    return LossGradMatch{mul, lp, unsq->inputs[0], coef};
  }
  return std::nullopt;
}

/// True when `v` is computed from an output of `n` (its producers walked back to the inputs).
bool depends_on(const Value* v, const Node* n) {
  std::vector<const Node*> todo;
  std::unordered_set<const Node*> seen;
  if (v && v->producer) todo.push_back(v->producer);
  while (!todo.empty()) {
    const Node* m = todo.back();
    todo.pop_back();
    if (m == n) return true;
    if (!seen.insert(m).second) continue;
    for (const Value* in : m->inputs)
      if (in && in->producer) todo.push_back(in->producer);
    for (const Value* in : m->implicit_inputs)
      if (in && in->producer) todo.push_back(in->producer);
  }
  return false;
}

}  // namespace

size_t fuse_softmax_cross_entropy_loss_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  struct Pair {
    Node* loss;
    Node* grad;
  };
  std::vector<Pair> pairs;
  for (const auto& n : g.nodes()) {
    Node* grad = n.get();
    if (!is_op(grad, "SoftmaxCrossEntropyGrad", "ai.onyx") || grad->num_inputs() != 3 ||
        !grad->has_input(0) || !grad->has_input(1) || !grad->has_input(2) ||
        grad->outputs.size() != 1)
      continue;
    Value* lp = grad->inputs[0];
    Node* loss = lp->producer;
    // log_prob read by the gradient alone (not a graph output), so it need not exist.
    if (!is_op(loss, "SoftmaxCrossEntropyLoss") || lp->producer_output != 1 ||
        only_consumer(g, lp) != grad || !loss->has_input(0) || !loss->has_input(1) ||
        loss->outputs.empty() || !loss->outputs[0])
      continue;
    const DataType dt = loss->inputs[0]->type.elem;
    if (dt != lp->type.elem ||
        !runs_it.registry().find("SoftmaxCrossEntropyLossGrad", "ai.onyx", 1, runs_it.name(), dt))
      continue;
    // The fused node computes the loss where the gradient ran: coef (from the loss seed) must
    // not be computed from the loss itself.
    if (depends_on(grad->inputs[2], loss)) continue;
    pairs.push_back({loss, grad});
  }
  for (const Pair& p : pairs) {
    std::vector<Value*> inputs{p.loss->inputs[0], p.loss->inputs[1], p.grad->inputs[1],
                               p.grad->inputs[2]};
    if (p.loss->has_input(2)) inputs.push_back(p.loss->inputs[2]);
    Value* loss_out = p.loss->outputs[0];
    Value* dx = p.grad->outputs[0];
    detach_output(g, p.loss, 0);
    detach_output(g, p.grad, 0);
    Node* f = g.add_node("SoftmaxCrossEntropyLossGrad", std::move(inputs), {loss_out, dx},
                         "ai.onyx", p.loss->name + "_with_grad");
    for (const char* a : {"reduction", "ignore_index"})
      if (const Attribute* at = p.loss->attr(a)) f->attrs[a] = *at;
    import_domain(model, "ai.onyx");
  }
  return pairs.size();
}

size_t fuse_softmax_cross_entropy_grad(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  std::vector<LossGradMatch> matches;
  for (const auto& n : g.nodes())
    if (auto m = match_loss_grad(g, n.get())) {
      if (runs_it.registry().find("SoftmaxCrossEntropyGrad", "ai.onyx", 1, runs_it.name(),
                                  m->log_prob->type.elem))
        matches.push_back(*m);
    }
  for (const LossGradMatch& m : matches)
    replace_producer(model, m.mul->outputs[0], "SoftmaxCrossEntropyGrad", "ai.onyx",
                     {m.log_prob, m.labels, m.coef});
  return matches.size();
}

}  // namespace onyx
