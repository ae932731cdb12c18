#include "autodiff/gradient_rules.h"

#include <algorithm>

#include "autodiff/subgraph.h"
#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

std::optional<Tensor> const_tensor(const Value* v) {
  if (!v) return std::nullopt;
  if (const Tensor* t = v->owner ? v->owner->initializer(v) : nullptr) return *t;
  const Node* p = v->producer;
  if (!p || p->op_type != "Constant" || !canonical_domain(p->domain).empty()) return std::nullopt;
  if (const Attribute* a = p->attr("value"); a && a->type == Attribute::Type::Tensor) return a->t;
  if (const Attribute* a = p->attr("value_float")) return Tensor::scalar<float>(a->f);
  if (const Attribute* a = p->attr("value_int")) return Tensor::scalar<int64_t>(a->i);
  if (const Attribute* a = p->attr("value_floats"))
    return Tensor::from_vector<float>({static_cast<int64_t>(a->floats.size())}, a->floats);
  if (const Attribute* a = p->attr("value_ints"))
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(a->ints.size())}, a->ints);
  return std::nullopt;
}

GradContext::GradContext(Graph& g, Node& fwd, std::vector<Value*> douts, std::vector<bool> wants)
    : g_(g), fwd_(fwd), douts_(std::move(douts)), wants_(std::move(wants)), dins_(fwd.inputs.size()) {}

Value* GradContext::out(int i) const {
  return i < static_cast<int>(fwd_.outputs.size()) ? fwd_.outputs[i] : nullptr;
}

Value* GradContext::ensure_out(int i) {
  if (Value* v = out(i)) return v;
  if (static_cast<int>(fwd_.outputs.size()) <= i) fwd_.outputs.resize(i + 1, nullptr);
  Value* v = fresh(fmt::format("{}_out{}", fwd_.op_type, i));
  v->producer = &fwd_;
  v->producer_output = i;
  fwd_.outputs[i] = v;
  return v;
}

void GradContext::set_din(int i, Value* g) {
  ONYX_CHECK(i >= 0 && i < static_cast<int>(dins_.size()), "{} rule set the gradient of input {}, "
             "which the node does not have", label(), i);
  if (!g) return;
  // A gradient has its input's type: later rules and sum_to rely on it.
  if (g->type.kind == ValueType::Kind::Unknown && in(i)) g->type = in(i)->type;
  dins_[i] = g;
}

const Model& GradContext::model() const {
  ONYX_CHECK(model_, "{}: the rule needs the model, which the builder did not set", label());
  return *model_;
}

bool GradContext::wants_implicit(const Value* v) const {
  return std::find(implicit_wants_.begin(), implicit_wants_.end(), v) != implicit_wants_.end();
}

void GradContext::set_dimplicit(Value* v, Value* g) {
  ONYX_CHECK(wants_implicit(v), "{} rule set the gradient of '{}', which no subgraph of the node "
             "reads with a gradient", label(), v->name);
  if (!g) return;
  if (g->type.kind == ValueType::Kind::Unknown) g->type = v->type;
  implicit_dins_[v] = g;
}

Value* GradContext::fresh(const std::string& hint) {
  std::string base = fwd_.name.empty() ? fwd_.op_type : fwd_.name;
  return g_.add_unique_value(fmt::format("{}_grad/{}", base, hint));
}

namespace {

bool same_type_unary(const std::string& op) {
  static const char* const kOps[] = {"Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Tanh",
                                     "Sigmoid", "Abs", "Sign", "Cos", "Sin", "Relu", "Identity"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

bool broadcasting_arithmetic(const std::string& op) {
  static const char* const kOps[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Where"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

// The rules' elementwise results are typed here, from their inputs' known shapes, because
// sum_to can pick a broadcast gradient's reduction axes while building only when both shapes
// are known; otherwise it emits the run-time Shape/NonZero/ReduceSum path, which for BERT's
// GELU gradient copied a [8, 128, 2048] tensor per Mul (graph shape inference types the rest
// later).
void type_elementwise(Node& n) {
  if (n.outputs.size() != 1 || n.outputs[0]->type.kind != ValueType::Kind::Unknown) return;
  const bool unary = same_type_unary(n.op_type);
  if (!unary && !broadcasting_arithmetic(n.op_type)) return;
  if (unary != (n.inputs.size() == 1) || (n.op_type == "Where") != (n.inputs.size() == 3)) return;
  // Where's data inputs are 1 and 2 (0 is the bool condition); the others' are all.
  const size_t first_data = n.op_type == "Where" ? 1 : 0;
  DataType dt = DataType::Undefined;
  std::optional<SymShape> shape = SymShape{};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    if (!v || !v->type.is_tensor() || !v->type.shape) return;
    if (i >= first_data) {
      if (dt == DataType::Undefined) dt = v->type.elem;
      if (v->type.elem != dt) return;
    }
    shape = broadcast_shapes(*shape, *v->type.shape);
    if (!shape) return;
  }
  if (dt == DataType::Undefined) return;
  n.outputs[0]->type = ValueType::tensor(dt, std::move(shape));
}

}  // namespace

std::vector<Value*> GradContext::op_n(const std::string& op_type, const std::vector<Value*>& inputs,
                                      int n, Attrs attrs) {
  std::vector<Value*> outs;
  for (int i = 0; i < n; ++i) outs.push_back(fresh(op_type));
  std::string base = fwd_.name.empty() ? fwd_.op_type : fwd_.name;
  Node* node = g_.add_node(op_type, inputs, outs, "",
                           fmt::format("{}_grad/{}_{}", base, op_type, g_.num_nodes()));
  for (auto& a : attrs) node->attrs[a.name] = std::move(a);
  type_elementwise(*node);
  return outs;
}

Value* GradContext::op(const std::string& op_type, const std::vector<Value*>& inputs, Attrs attrs) {
  return op_n(op_type, inputs, 1, std::move(attrs))[0];
}


Value* GradContext::scalar(double v, const Value* like) {
  Value* c = fresh("const");
  return g_.add_initializer(c->name, scalar_tensor(dtype(like), v));
}

Value* GradContext::ints(const std::vector<int64_t>& v) {
  Value* c = fresh("ints");
  return g_.add_initializer(c->name, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

Value* GradContext::int_scalar(int64_t v) {
  Value* c = fresh("int");
  return g_.add_initializer(c->name, Tensor::scalar<int64_t>(v));
}

Attribute GradContext::attr_dtype_of(const Value* like) const {
  return Attribute::of_int("to", static_cast<int64_t>(dtype(like)));
}

Value* GradContext::cast_like(Value* v, const Value* like) {
  return op("Cast", {v}, {attr_dtype_of(like)});
}

Value* GradContext::shape_of(Value* v) { return op("Shape", {v}); }

Value* GradContext::reduce(const std::string& op_type, Value* v, const std::vector<int64_t>& axes,
                           bool keepdims) {
  Attrs attrs = {Attribute::of_int("keepdims", keepdims ? 1 : 0)};
  if (axes.empty()) return op(op_type, {v}, attrs);
  if (opset_ >= (op_type == "ReduceSum" ? 13 : 18)) return op(op_type, {v, ints(axes)}, attrs);
  attrs.push_back(Attribute::of_ints("axes", axes));
  return op(op_type, {v}, attrs);
}

DataType GradContext::dtype(const Value* v) const {
  ONYX_CHECK(v && v->type.is_tensor() && v->type.elem != DataType::Undefined,
             "{}: the dtype of '{}' is unknown (shape inference could not type it)", label(),
             v ? v->name : "<omitted>");
  return v->type.elem;
}

int GradContext::rank(const Value* v) const {
  if (!v || !v->type.is_tensor() || !v->type.shape) return -1;
  return static_cast<int>(v->type.shape->size());
}

const std::optional<SymShape>& GradContext::sym_shape(const Value* v) const {
  static const std::optional<SymShape> unknown;
  return v && v->type.is_tensor() ? v->type.shape : unknown;
}

int64_t GradContext::norm_axis(int64_t axis, int64_t r) const {
  ONYX_CHECK(axis >= -r && axis < r, "{}: axis {} is out of range for rank {}", label(), axis, r);
  return axis < 0 ? axis + r : axis;
}

std::string GradContext::label() const { return "[autodiff] " + fwd_.label(); }

Value* GradContext::sum_to(Value* g, Value* like) {
  const auto& gs = sym_shape(g);
  const auto& ls = sym_shape(like);
  if (gs && ls && gs->size() >= ls->size()) {
    // Static: reduce axes where `like` has a fixed 1 (or is missing) and g does not.
    size_t r = gs->size(), k = ls->size();
    std::vector<int64_t> axes;
    bool decided = true;
    for (size_t i = 0; i < r && decided; ++i) {
      const Dim& gd = (*gs)[i];
      if (i < r - k) {
        axes.push_back(static_cast<int64_t>(i));
        continue;
      }
      const Dim& ld = (*ls)[i - (r - k)];
      if (ld == gd && (ld.is_fixed() || !ld.param.empty())) continue;
      if (ld.is_fixed() && ld.value == 1) {
        if (!(gd.is_fixed() && gd.value == 1)) axes.push_back(static_cast<int64_t>(i));
        continue;
      }
      decided = false;
    }
    if (decided) {
      if (axes.empty()) return g;
      Value* red = op("ReduceSum", {g, ints(axes)}, {Attribute::of_int("keepdims", 1)});
      if (r > k) {
        std::vector<int64_t> lead;
        for (size_t i = 0; i < r - k; ++i) lead.push_back(static_cast<int64_t>(i));
        red = op("Squeeze", {red, ints(lead)});
      }
      red->type = like->type;
      return red;
    }
  }
  // Dynamic: pad like's shape with leading 1s to g's rank, reduce where it is 1 and g is not.
  Value* sg = shape_of(g);
  Value* sl = shape_of(like);
  Value* diff = op("Sub", {op("Size", {sg}), op("Size", {sl})});
  Value* ones = op("ConstantOfShape", {op("Unsqueeze", {diff, ints({0})})});
  {
    Attribute value;
    value.name = "value";
    value.type = Attribute::Type::Tensor;
    value.t = Tensor::from_vector<int64_t>({1}, {1});
    ones->producer->attrs["value"] = value;
  }
  Value* slp = op("Concat", {ones, sl}, {Attribute::of_int("axis", 0)});
  Value* one = int_scalar(1);
  Value* mask = op("And", {op("Equal", {slp, one}), op("Not", {op("Equal", {sg, one})})});
  Value* axes = op("Squeeze", {op("NonZero", {mask}), ints({0})});
  Value* red = op("ReduceSum", {g, axes}, {Attribute::of_int("keepdims", 1), Attribute::of_int("noop_with_empty_axes", 1)});
  Value* res = op("Reshape", {red, sl});
  res->type = like->type;
  return res;
}

void RuleTable::add(const std::string& op_type, GradRule rule) {
  ONYX_CHECK(!rules_.count(op_type), "[autodiff] two gradient rules for op '{}'", op_type);
  rules_[op_type] = std::move(rule);
}

const GradRule* RuleTable::find(const std::string& op_type) const {
  auto it = rules_.find(op_type);
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> RuleTable::op_types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : rules_) out.push_back(k);
  return out;
}

const RuleTable& gradient_rules() {
  static const RuleTable table = [] {
    RuleTable t;
    add_elementwise_rules(t);
    add_activation_rules(t);
    add_shape_rules(t);
    add_reduce_rules(t);
    add_linalg_rules(t);
    add_nn_rules(t);
    add_norm_rules(t);
    add_loss_rules(t);
    add_control_flow_rules(t);
    add_rnn_rules(t);
    add_attention_rules(t);
    add_spatial_rules(t);
    return t;
  }();
  return table;
}

const std::vector<std::pair<std::string, std::string>>& rewritten_op_types() {
  static const std::vector<std::pair<std::string, std::string>> ops = {
      {"", "Upsample"}, {"com.microsoft", "FusedConv"}, {"com.microsoft", "FusedMatMul"}};
  return ops;
}

}  // namespace onyx::autodiff
