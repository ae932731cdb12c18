#include "autodiff/loss.h"

#include <algorithm>

#include "graph/error.h"

namespace onyx::autodiff {

const std::vector<std::string>& loss_kinds() {
  static const std::vector<std::string> kinds = {
      "output", "softmax_cross_entropy", "nll", "mse", "l1", "huber", "bce_with_logits"};
  return kinds;
}

namespace {

struct Emitter {
  Graph& g;
  Node* add(const std::string& op, std::vector<Value*> ins, int n_out = 1) {
    std::vector<Value*> outs;
    for (int i = 0; i < n_out; ++i) outs.push_back(g.add_unique_value("loss/" + op));
    return g.add_node(op, std::move(ins), std::move(outs), "",
                      fmt::format("loss/{}_{}", op, g.num_nodes()));
  }
  Value* op(const std::string& op, std::vector<Value*> ins) {
    return add(op, std::move(ins))->outputs[0];
  }
  /// A Constant node, not an initializer: float initializers count as trainable parameters.
  Value* constant(Tensor t) {
    Attribute a;
    a.name = "value";
    a.type = Attribute::Type::Tensor;
    a.t = std::move(t);
    Node* n = add("Constant", {});
    n->attrs["value"] = a;
    return n->outputs[0];
  }
  Value* scalar(double v, DataType dt) {
    if (dt != DataType::Double && dt != DataType::Float)
      ONYX_THROW("[loss] regression losses need float or double predictions, found {}",
                 dtype_name(dt));
    return constant(dt == DataType::Double ? Tensor::scalar<double>(v)
                                           : Tensor::scalar<float>(static_cast<float>(v)));
  }
  /// An int64 1-D Constant node.
  Value* ints(const std::vector<int64_t>& v) {
    return constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  }
  /// ReduceMean/ReduceSum over all axes to a scalar (no axes: valid in every opset).
  Value* reduce_all(Value* x, const std::string& reduction) {
    Node* n = add(reduction == "mean" ? "ReduceMean" : "ReduceSum", {x});
    n->attrs["keepdims"] = Attribute::of_int("keepdims", 0);
    return n->outputs[0];
  }
};


}  // namespace

LossNodes append_loss(Model& model, const LossSpec& spec) {
  Graph& g = *model.graph;
  const auto& kinds = loss_kinds();
  ONYX_CHECK(std::find(kinds.begin(), kinds.end(), spec.kind) != kinds.end(),
             "[loss] unknown loss '{}'; expected one of: {}", spec.kind, fmt::join(kinds, ", "));
  ONYX_CHECK(spec.reduction == "mean" || spec.reduction == "sum" || spec.reduction == "none",
             "[loss] reduction should be mean, sum or none but is '{}'", spec.reduction);
  ONYX_CHECK(!g.outputs.empty(), "[loss] the model has no outputs");
  Value* pred = g.outputs[0];
  if (!spec.output.empty()) {
    auto it = std::find_if(g.outputs.begin(), g.outputs.end(),
                           [&](Value* v) { return v->name == spec.output; });
    if (it == g.outputs.end()) {
      std::vector<std::string> names;
      for (Value* v : g.outputs) names.push_back(v->name);
      ONYX_THROW("[loss] the model has no output '{}'; its outputs are: {}", spec.output,
                 fmt::join(names, ", "));
    }
    pred = *it;
  }
  ONYX_CHECK(pred->type.is_tensor() && pred->type.elem != DataType::Undefined,
             "[loss] the type of output '{}' is unknown", pred->name);
  LossNodes out;
  Emitter e{g};
  if (spec.kind == "output") {
    ONYX_CHECK(
        !pred->type.shape || std::all_of(pred->type.shape->begin(), pred->type.shape->end(),
                                         [](const Dim& d) { return d.is_fixed() && d.value == 1; }),
        "[loss] output '{}' is used as the loss, so it should be a scalar but has shape {}",
        pred->name, sym_shape_str(*pred->type.shape));
    out.loss = pred->type.shape && pred->type.shape->empty() ? pred : e.reduce_all(pred, "sum");
    return out;
  }
  ONYX_CHECK(!spec.labels.empty(),
             "[loss] the label input needs a name but LossSpec::labels is empty");
  ONYX_CHECK(!g.find_value(spec.labels),
             "[loss] the label input name '{}' is already used in the model", spec.labels);
  Value* labels = g.get_or_add_value(spec.labels);
  g.inputs.push_back(labels);
  out.labels = labels;
  const auto& ps = pred->type.shape;
  bool classify = spec.kind == "softmax_cross_entropy" || spec.kind == "nll";
  if (classify) {
    std::optional<SymShape> ls;
    Value* scores = pred;
    bool label_rows = false;  // scores and labels flattened to rows (classes last)
    if (ps) {
      ONYX_CHECK(ps->size() >= 2,
                 "[loss] {} needs scores of shape [N, C, ...] but '{}' has shape {}", spec.kind,
                 pred->name, sym_shape_str(*ps));
      const int64_t r = static_cast<int64_t>(ps->size());
      const int64_t axis = spec.class_axis < 0 ? spec.class_axis + r : spec.class_axis;
      ONYX_CHECK(axis >= 1 && axis < r,
                 "[loss] class axis {} is out of range for scores '{}' of shape {} (expected 1 "
                 "to {}, or -1 for the last)",
                 spec.class_axis, pred->name, sym_shape_str(*ps), r - 1);
      ls = *ps;
      ls->erase(ls->begin() + axis);
      const Dim& classes = (*ps)[static_cast<size_t>(axis)];
      if (axis == r - 1 && r > 2 && classes.is_fixed()) {
        // Classes last (a language model's [N, S, C] logits): rows of [N * S, C] and labels of
        // [N * S], which the loss ops read contiguously, instead of a transposed copy whose
        // classes lie S apart (the loss took 236 ms of a GPT-2-style step that way). The same
        // losses: mean and sum run over every row either way.
        scores = e.op("Reshape", {pred, e.ints({-1, classes.value})});
        Dim rows = Dim::fixed(1);
        for (const Dim& d : *ls)
          rows = d.is_fixed() && rows.is_fixed() ? Dim::fixed(rows.value * d.value) : Dim{};
        scores->type = ValueType::tensor(pred->type.elem, SymShape{rows, classes});
        label_rows = true;
      } else if (axis != 1) {  // move the classes to axis 1, where the ONNX loss ops read them
        std::vector<int64_t> perm = {0, axis};
        for (int64_t i = 1; i < r; ++i)
          if (i != axis) perm.push_back(i);
        Node* t = e.add("Transpose", {pred});
        t->attrs["perm"] = Attribute::of_ints("perm", perm);
        SymShape moved;
        for (int64_t p : perm) moved.push_back((*ps)[static_cast<size_t>(p)]);
        scores = t->outputs[0];
        scores->type = ValueType::tensor(pred->type.elem, moved);
      }
    } else {
      ONYX_CHECK(spec.class_axis == 1,
                 "[loss] class axis {} needs the rank of '{}', which shape inference could not "
                 "tell",
                 spec.class_axis, pred->name);
    }
    labels->type = ValueType::tensor(DataType::Int64, ls);
    std::vector<Value*> ins = {scores,
                               label_rows ? e.op("Reshape", {labels, e.ints({-1})}) : labels};
    if (!spec.weight.empty()) {
      Value* w = g.find_value(spec.weight);
      ONYX_CHECK(w && g.is_initializer(w),
                 "[loss] class weights '{}' are not an initializer of the model", spec.weight);
      const Tensor& wt = g.initializers.at(spec.weight);
      ONYX_CHECK(wt.dtype() == pred->type.elem && wt.rank() == 1,
                 "[loss] class weights '{}' should be a "
                 "1-D {} tensor like the scores but are {} {}",
                 spec.weight, dtype_name(pred->type.elem), dtype_name(wt.dtype()),
                 shape_str(wt.shape()));
      ins.push_back(w);
    }
    Node* n = e.add(spec.kind == "nll" ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss",
                    ins, spec.kind == "nll" ? 1 : 2);
    n->attrs["reduction"] = Attribute::of_string("reduction", spec.reduction);
    if (spec.ignore_index)
      n->attrs["ignore_index"] = Attribute::of_int("ignore_index", *spec.ignore_index);
    out.loss = spec.reduction == "none" ? e.reduce_all(n->outputs[0], "sum") : n->outputs[0];
    return out;
  }
  labels->type = pred->type;
  DataType dt = pred->type.elem;
  Value* per = nullptr;
  if (spec.kind == "mse") {
    Value* d = e.op("Sub", {pred, labels});
    per = e.op("Mul", {d, d});
  } else if (spec.kind == "l1") {
    per = e.op("Abs", {e.op("Sub", {pred, labels})});
  } else if (spec.kind == "huber") {
    ONYX_CHECK(spec.delta > 0, "[loss] huber delta should be positive but is {}", spec.delta);
    Value* d = e.op("Sub", {pred, labels});
    Value* a = e.op("Abs", {d});
    Value* quad = e.op("Mul", {e.scalar(0.5, dt), e.op("Mul", {d, d})});
    Value* lin =
        e.op("Mul", {e.scalar(spec.delta, dt), e.op("Sub", {a, e.scalar(0.5 * spec.delta, dt)})});
    per = e.op("Where", {e.op("Less", {a, e.scalar(spec.delta, dt)}), quad, lin});
  } else {  // bce_with_logits: softplus(x) - x*y; Softplus is overflow-safe, and the gradient
            // sigmoid(x) - y stays exact at x = 0, where max(x,0) + softplus(-|x|) has kinks
    per = e.op("Sub", {e.op("Softplus", {pred}), e.op("Mul", {pred, labels})});
  }
  out.loss = e.reduce_all(per, spec.reduction == "mean" ? "mean" : "sum");
  return out;
}

}  // namespace onyx::autodiff
