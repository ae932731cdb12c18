#include "graph/shape_inference.h"

#include <functional>
#include <unordered_map>

#include "graph/schema.h"

namespace onyx {
namespace {

// "tensor(float)" -> Float; "seq(tensor(int64))" etc. -> Undefined.
DataType tensor_type_of(const std::string& ts) {
  if (ts.rfind("tensor(", 0) != 0) return DataType::Undefined;
  std::string n = ts.substr(7, ts.size() - 8);
  if (n == "string") return DataType::String;
  for (int i = 1; i <= 26; ++i)
    if (dtype_name(static_cast<DataType>(i)) == n) return static_cast<DataType>(i);
  return DataType::Undefined;
}

std::string type_string(const ValueType& t) {
  switch (t.kind) {
    case ValueType::Kind::Tensor: return fmt::format("tensor({})", dtype_name(t.elem));
    case ValueType::Kind::Sequence: return t.inner ? fmt::format("seq({})", type_string(*t.inner)) : "";
    case ValueType::Kind::Optional:
      return t.inner ? fmt::format("optional({})", type_string(*t.inner)) : "";
    default: return "";
  }
}

bool fully_known(const ValueType& t) {
  if (t.kind == ValueType::Kind::Tensor) return t.elem != DataType::Undefined;
  if (t.kind == ValueType::Kind::Sequence || t.kind == ValueType::Kind::Optional)
    return t.inner && fully_known(*t.inner);
  return false;
}

struct Ctx {
  const Node& node;
  const Graph& graph;
  std::vector<ValueType> out;  // proposed output types (kind Unknown = no opinion)

  const ValueType* in(int i) const {
    return node.has_input(i) ? &node.inputs[i]->type : nullptr;
  }
  const SymShape* in_shape(int i) const {
    const ValueType* t = in(i);
    return t && t->is_tensor() && t->shape ? &*t->shape : nullptr;
  }
  // A constant input's values (initializer), when there is one.
  const Tensor* const_in(int i) const {
    if (!node.has_input(i)) return nullptr;
    for (const Graph* g = &graph; g; g = g->parent)
      if (const Tensor* t = g->initializer(node.inputs[i])) return t;
    return nullptr;
  }
  void set_shape(int o, SymShape s) {
    if (o < static_cast<int>(out.size())) out[o].shape = std::move(s);
  }
};

SymShape fixed(const Shape& s) {
  SymShape r;
  for (int64_t d : s) r.push_back(Dim::fixed(d));
  return r;
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

using Rule = std::function<void(Ctx&)>;

void same_shape(Ctx& c) {
  if (auto s = c.in_shape(0)) c.set_shape(0, *s);
}

void broadcast_all(Ctx& c) {
  std::optional<SymShape> acc;
  for (int i = 0; i < c.node.num_inputs(); ++i) {
    auto s = c.in_shape(i);
    if (!s) return;
    acc = acc ? broadcast_shapes(*acc, *s) : *s;
    if (!acc) return;  // left to the kernel, which knows each opset's broadcasting rule
  }
  if (acc) c.set_shape(0, *acc);
}

void matmul(Ctx& c) {
  auto a = c.in_shape(0), b = c.in_shape(1);
  if (!a || !b || a->empty() || b->empty()) return;
  SymShape A = *a, B = *b;
  bool va = A.size() == 1, vb = B.size() == 1;
  if (va) A.insert(A.begin(), Dim::fixed(1));
  if (vb) B.push_back(Dim::fixed(1));
  SymShape ba(A.begin(), A.end() - 2), bb(B.begin(), B.end() - 2);
  auto batch = broadcast_shapes(ba, bb);
  if (!batch) return;
  SymShape r = *batch;
  if (!va) r.push_back(A[A.size() - 2]);
  if (!vb) r.push_back(B.back());
  c.set_shape(0, r);
}

void transpose(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  auto perm = c.node.attr_ints("perm");
  SymShape r;
  if (perm.empty()) {
    r.assign(s->rbegin(), s->rend());
  } else {
    if (perm.size() != s->size()) return;
    for (int64_t p : perm) r.push_back((*s)[norm_axis(p, s->size())]);
  }
  c.set_shape(0, r);
}

void shape_op(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  int64_t r = static_cast<int64_t>(s->size());
  int64_t start = norm_axis(c.node.attr_int("start", 0), s->size());
  int64_t end = c.node.has_attr("end") ? norm_axis(c.node.attr_int("end", r), s->size()) : r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  c.set_shape(0, {Dim::fixed(std::max<int64_t>(0, end - start))});
}

void reshape(Ctx& c) {
  const Tensor* t = c.const_in(1);
  if (!t) return;
  auto target = t->to_int64_vector();
  auto s = c.in_shape(0);
  bool allowzero = c.node.attr_int("allowzero", 0) != 0;
  SymShape r;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      if (!s || i >= s->size()) return;
      r.push_back((*s)[i]);
    } else if (target[i] == -1) {
      infer = static_cast<int>(i);
      r.push_back(Dim{});
    } else {
      r.push_back(Dim::fixed(target[i]));
    }
  }
  if (infer >= 0 && s) {
    int64_t total = 1, known = 1;
    for (const auto& d : *s) {
      if (!d.is_fixed()) return c.set_shape(0, r);
      total *= d.value;
    }
    for (const auto& d : r)
      if (d.is_fixed()) known *= d.value;
    if (known > 0) r[infer] = Dim::fixed(total / known);
  }
  c.set_shape(0, r);
}

void gemm(Ctx& c) {
  auto a = c.in_shape(0), b = c.in_shape(1);
  if (!a || !b || a->size() != 2 || b->size() != 2) return;
  Dim m = c.node.attr_int("transA", 0) ? (*a)[1] : (*a)[0];
  Dim n = c.node.attr_int("transB", 0) ? (*b)[0] : (*b)[1];
  c.set_shape(0, {m, n});
}

void flatten(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  int64_t axis = norm_axis(c.node.attr_int("axis", 1), s->size());
  auto prod = [&](size_t from, size_t to) -> Dim {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) {
      if (!(*s)[i].is_fixed()) return Dim{};
      p *= (*s)[i].value;
    }
    return Dim::fixed(p);
  };
  c.set_shape(0, {prod(0, static_cast<size_t>(axis)), prod(static_cast<size_t>(axis), s->size())});
}

void concat(Ctx& c) {
  auto s0 = c.in_shape(0);
  if (!s0) return;
  int64_t axis = norm_axis(c.node.attr_int("axis", 0), s0->size());
  SymShape r = *s0;
  for (int i = 1; i < c.node.num_inputs(); ++i) {
    auto s = c.in_shape(i);
    if (!s || s->size() != r.size()) return;
    Dim& d = r[axis];
    d = d.is_fixed() && (*s)[axis].is_fixed() ? Dim::fixed(d.value + (*s)[axis].value) : Dim{};
  }
  c.set_shape(0, r);
}

void gather(Ctx& c) {
  auto d = c.in_shape(0), i = c.in_shape(1);
  if (!d || !i) return;
  int64_t axis = norm_axis(c.node.attr_int("axis", 0), d->size());
  SymShape r(d->begin(), d->begin() + axis);
  r.insert(r.end(), i->begin(), i->end());
  r.insert(r.end(), d->begin() + axis + 1, d->end());
  c.set_shape(0, r);
}

void unsqueeze(Ctx& c) {
  auto s = c.in_shape(0);
  const Tensor* t = c.const_in(1);
  std::vector<int64_t> axes = t ? t->to_int64_vector() : c.node.attr_ints("axes");
  if (!s || axes.empty()) return;
  size_t out_rank = s->size() + axes.size();
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : axes) {
    a = norm_axis(a, out_rank);
    if (a < 0 || a >= static_cast<int64_t>(out_rank)) return;
    inserted[a] = true;
  }
  SymShape r;
  size_t k = 0;
  for (size_t i = 0; i < out_rank; ++i) r.push_back(inserted[i] ? Dim::fixed(1) : (*s)[k++]);
  c.set_shape(0, r);
}

void reduce(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  const Tensor* t = c.const_in(1);
  std::vector<int64_t> axes = t ? t->to_int64_vector() : c.node.attr_ints("axes");
  if (c.node.has_input(1) && !t) return;
  bool keep = c.node.attr_int("keepdims", 1) != 0;
  if (axes.empty() && c.node.attr_int("noop_with_empty_axes", 0)) return same_shape(c);
  std::vector<bool> red(s->size(), axes.empty());
  for (int64_t a : axes) {
    a = norm_axis(a, s->size());
    if (a < 0 || a >= static_cast<int64_t>(s->size())) return;
    red[a] = true;
  }
  SymShape r;
  for (size_t i = 0; i < s->size(); ++i)
    if (!red[i]) r.push_back((*s)[i]);
    else if (keep) r.push_back(Dim::fixed(1));
  c.set_shape(0, r);
}

void constant(Ctx& c) {
  if (const Attribute* a = c.node.attr("value"); a && a->type == Attribute::Type::Tensor) {
    c.out[0] = ValueType::tensor(a->t.dtype(), fixed(a->t.shape()));
    return;
  }
  static const std::pair<const char*, DataType> scalars[] = {
      {"value_float", DataType::Float}, {"value_int", DataType::Int64}, {"value_string", DataType::String}};
  for (auto [n, dt] : scalars)
    if (c.node.has_attr(n)) c.out[0] = ValueType::tensor(dt, SymShape{});
  static const std::pair<const char*, DataType> lists[] = {
      {"value_floats", DataType::Float}, {"value_ints", DataType::Int64}, {"value_strings", DataType::String}};
  for (auto [n, dt] : lists)
    if (const Attribute* a = c.node.attr(n))
      c.out[0] = ValueType::tensor(
          dt, SymShape{Dim::fixed(static_cast<int64_t>(std::max({a->floats.size(), a->ints.size(), a->strings.size()})))});
}

void cast(Ctx& c) {
  int64_t to = c.node.attr_int("to", 0);
  if (dtype_is_known(static_cast<int32_t>(to))) c.out[0] = ValueType::tensor(static_cast<DataType>(to));
  same_shape(c);
}

void cast_like(Ctx& c) {
  if (const ValueType* t = c.in(1); t && t->is_tensor()) c.out[0] = ValueType::tensor(t->elem);
  same_shape(c);
}

// LayerNormalization: Y like X; Mean and InvStdDev of dtype stash_type (a float type, else
// float as the kernel does), shaped X.shape[:axis] + 1s.
void layer_norm(Ctx& c) {
  same_shape(c);
  auto dt = static_cast<DataType>(c.node.attr_int("stash_type", 1));
  if (dt != DataType::Double && dt != DataType::Float16 && dt != DataType::BFloat16)
    dt = DataType::Float;
  const SymShape* s = c.in_shape(0);
  for (int o = 1; o <= 2 && o < static_cast<int>(c.out.size()); ++o) {
    c.out[o] = ValueType::tensor(dt);
    if (!s) continue;
    int64_t axis = norm_axis(c.node.attr_int("axis", -1), s->size());
    if (axis < 0 || axis > static_cast<int64_t>(s->size())) continue;
    SymShape r(s->begin(), s->begin() + axis);
    r.resize(s->size(), Dim::fixed(1));
    c.set_shape(o, r);
  }
}

void constant_of_shape(Ctx& c) {
  DataType dt = DataType::Float;
  if (const Attribute* a = c.node.attr("value"); a && a->type == Attribute::Type::Tensor) dt = a->t.dtype();
  c.out[0] = ValueType::tensor(dt);
  if (const Tensor* t = c.const_in(0)) c.out[0].shape = fixed(t->to_int64_vector());
}

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    // Elementwise and shape-preserving ops: output shape is input 0's.
    for (const char* op :
         {"Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Relu", "LeakyRelu", "Elu", "Selu", "Gelu",
          "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Softmax",
          "LogSoftmax", "Hardmax", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Not", "Identity",
          "Dropout", "Clip", "CumSum", "LayerNormalization", "BatchNormalization",
          "InstanceNormalization", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
          "Asinh", "Acosh", "Atanh", "IsNaN", "IsInf", "Mish", "Celu", "ThresholdedRelu",
          "Shrink", "LpNormalization", "Trilu", "Bernoulli", "BitwiseNot", "GroupNormalization",
          "RMSNormalization", "MeanVarianceNormalization", "LRN", "Swish"})
      t[op] = same_shape;
    for (const char* op :
         {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum", "Mean", "Equal", "Less",
          "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu",
          "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
      t[op] = broadcast_all;
    t["MatMul"] = matmul;
    t["Transpose"] = transpose;
    t["Shape"] = shape_op;
    t["Size"] = [](Ctx& c) { c.set_shape(0, {}); };
    t["Reshape"] = reshape;
    t["Gemm"] = gemm;
    t["Flatten"] = flatten;
    t["Concat"] = concat;
    t["Gather"] = gather;
    t["Unsqueeze"] = unsqueeze;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      t[op] = reduce;
    t["Constant"] = constant;
    t["Cast"] = cast;
    t["CastLike"] = cast_like;
    t["ConstantOfShape"] = constant_of_shape;
    t["LayerNormalization"] = layer_norm;
    return t;
  }();
  return table;
}

void infer_node(const Model& model, const Graph& g, Node& node) {
  Ctx c{node, g, std::vector<ValueType>(node.outputs.size())};
  const OpSchema* s = find_schema(node.op_type, node.domain, model.opset(node.domain));
  if (s) {
    // Bind each type parameter to the first known input type; a homogeneous parameter
    // bound twice to different types is a type mismatch.
    std::unordered_map<std::string, std::pair<std::string, const Value*>> bound;
    for (int i = 0; i < node.num_inputs(); ++i) {
      const FormalParam* p = s->input_param(i);
      const Value* v = node.inputs[i];
      if (!p || !v || !fully_known(v->type)) continue;
      std::string ts = type_string(v->type);
      auto cons = s->constraints.find(p->type_str);
      if (cons == s->constraints.end()) continue;
      const auto& allowed = cons->second;
      ONYX_CHECK(std::find(allowed.begin(), allowed.end(), ts) != allowed.end(),
                 "[validate] {}: type mismatch: input {} '{}' is {}, but {}-{} accepts {} there",
                 node.label(), i, v->name, ts, node.op_type, s->since_version, fmt::join(allowed, ", "));
      auto [it, fresh] = bound.emplace(p->type_str, std::make_pair(ts, v));
      bool variadic_mixed = p->option == 'V' && !p->homogeneous;
      ONYX_CHECK(fresh || variadic_mixed || it->second.first == ts,
                 "[validate] {}: type mismatch: inputs '{}' ({}) and '{}' ({}) must have the same "
                 "type {}",
                 node.label(), it->second.second->name, it->second.first, v->name, ts, p->type_str);
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const FormalParam* p = s->output_param(static_cast<int>(o));
      if (!p) continue;
      DataType dt = DataType::Undefined;
      if (auto b = bound.find(p->type_str); b != bound.end()) {
        dt = tensor_type_of(b->second.first);
      } else if (auto cons = s->constraints.find(p->type_str); cons != s->constraints.end()) {
        if (cons->second.size() == 1) dt = tensor_type_of(cons->second[0]);
      } else {
        dt = tensor_type_of(p->type_str);
      }
      if (dt != DataType::Undefined) c.out[o] = ValueType::tensor(dt);
    }
  }
  auto r = rules().find(node.op_type);
  if (r != rules().end() && node.domain.empty()) {
    if (!c.out.empty() && c.out[0].kind == ValueType::Kind::Unknown)
      if (const ValueType* t0 = c.in(0); t0 && t0->is_tensor())
        c.out[0] = ValueType::tensor(DataType::Undefined);
    r->second(c);
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    Value* v = node.outputs[o];
    if (!v) continue;
    ValueType& t = v->type;
    const ValueType& p = c.out[o];
    if (t.kind == ValueType::Kind::Unknown && p.kind != ValueType::Kind::Unknown) {
      t = p;
    } else if (t.is_tensor() && p.is_tensor()) {
      if (t.elem == DataType::Undefined) t.elem = p.elem;
      if (!t.shape && p.shape) t.shape = p.shape;
    }
  }
}

void infer_graph(const Model& model, Graph& g) {
  for (Node* n : g.topological_order()) {
    for (auto& [an, a] : n->attrs) {
      if (a.g) infer_graph(model, *a.g);
      for (auto& sg : a.graphs) infer_graph(model, *sg);
    }
    infer_node(model, g, *n);
  }
}

}  // namespace

std::optional<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b) {
  size_t n = std::max(a.size(), b.size());
  SymShape r(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim* db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da) r[i] = *db;
    else if (!db) r[i] = *da;
    else if (da->is_fixed() && db->is_fixed()) {
      if (da->value != db->value && da->value != 1 && db->value != 1) return std::nullopt;
      r[i] = Dim::fixed(da->value == 1 ? db->value : da->value);
    } else if (da->is_fixed() && da->value == 1) r[i] = *db;
    else if (db->is_fixed() && db->value == 1) r[i] = *da;
    else if (*da == *db) r[i] = *da;
    else r[i] = da->is_fixed() ? *da : db->is_fixed() ? *db : Dim{};
  }
  return r;
}

void infer_types_and_shapes(Model& model) { infer_graph(model, *model.graph); }

}  // namespace onyx
