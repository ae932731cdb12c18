#include "autodiff/subgraph.h"

#include <algorithm>
#include <set>

#include "graph/error.h"

namespace onyx::autodiff {

namespace {

/// g's value named like v, typed like v when g did not type it yet.
Value* same_in(Graph& g, const Value* v) {
  Value* d = g.get_or_add_value(v->name);
  if (d->type.kind == ValueType::Kind::Unknown) d->type = v->type;
  return d;
}

}  // namespace

std::shared_ptr<Graph> clone_graph(const Graph& src, Graph* parent) {
  auto g = std::make_shared<Graph>(src.name, parent);
  g->doc_string = src.doc_string;
  for (const auto& [name, t] : src.initializers) g->add_initializer(name, t);
  g->overridable_initializers = src.overridable_initializers;
  for (const Value* v : src.inputs) g->inputs.push_back(same_in(*g, v));
  for (const Node* n : src.topological_order()) copy_node(*g, *n);
  for (const Value* v : src.outputs) g->outputs.push_back(same_in(*g, v));
  return g;
}

Node* copy_node(Graph& g, const Node& n) {
  std::vector<Value*> ins, outs;
  for (const Value* v : n.inputs) ins.push_back(v ? same_in(g, v) : nullptr);
  for (const Value* v : n.outputs) outs.push_back(v ? same_in(g, v) : nullptr);
  Node* c = g.add_node(n.op_type, ins, outs, n.domain, n.name);
  c->doc_string = n.doc_string;
  c->attrs = n.attrs;
  for (auto& [k, a] : c->attrs) {
    if (a.g) a.g = clone_graph(*a.g, &g);
    for (auto& sg : a.graphs) sg = clone_graph(*sg, &g);
  }
  // Outer values read through the source node's subgraphs keep their types.
  for (const Value* v : n.implicit_inputs) same_in(g, v);
  update_implicit_inputs(g, c);
  return c;
}

void update_implicit_inputs(Graph& g, Node* n) {
  for (Value* v : n->implicit_inputs) {
    auto& cs = v->consumers;
    cs.erase(std::remove(cs.begin(), cs.end(), std::make_pair(n, -1)), cs.end());
  }
  n->implicit_inputs.clear();
  std::set<std::string> seen;
  for (const auto& [k, a] : n->attrs) {
    std::vector<std::shared_ptr<Graph>> subs = a.graphs;
    if (a.g) subs.push_back(a.g);
    for (const auto& sg : subs)
      for (const std::string& name : sg->outer_scope_names()) {
        if (!seen.insert(name).second) continue;
        Value* v = g.get_or_add_value(name);
        if (v->type.kind == ValueType::Kind::Unknown)
          if (const Value* inner = sg->find_value(name)) v->type = inner->type;
        g.add_implicit_input(n, v);
      }
  }
}

Value* outer_ref(Graph& sub, const Value* v) {
  Value* r = same_in(sub, v);
  bool local = r->producer || sub.initializers.count(r->name) ||
               std::find(sub.inputs.begin(), sub.inputs.end(), r) != sub.inputs.end();
  ONYX_CHECK(!local, "[autodiff] subgraph '{}' defines '{}' itself, so it cannot read the outer "
             "value of that name", sub.name, v->name);
  return r;
}

Attribute graph_attr(const std::string& name, std::shared_ptr<Graph> g) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Graph;
  a.g = std::move(g);
  return a;
}

Tensor scalar_tensor(DataType dt, double v) {
  switch (dt) {
    case DataType::Float: return Tensor::scalar<float>(static_cast<float>(v));
    case DataType::Double: return Tensor::scalar<double>(v);
    case DataType::Float16: return Tensor::scalar<float16>(float16(static_cast<float>(v)));
    case DataType::BFloat16: return Tensor::scalar<bfloat16>(bfloat16(static_cast<float>(v)));
    case DataType::Int64: return Tensor::scalar<int64_t>(static_cast<int64_t>(v));
    case DataType::Int32: return Tensor::scalar<int32_t>(static_cast<int32_t>(v));
    case DataType::Bool: return Tensor::scalar<bool>(v != 0);
    default: ONYX_THROW("[autodiff] no scalar constant of dtype {}", dtype_name(dt));
  }
}

Node* Emitter::add(const std::string& op_type, const std::vector<Value*>& inputs,
                   const std::vector<Value*>& outs, std::vector<Attribute> attrs) {
  Node* n = g_.add_node(op_type, inputs, outs, "", fmt::format("{}/{}_{}", base_, op_type, g_.num_nodes()));
  for (auto& a : attrs) n->attrs[a.name] = std::move(a);
  return n;
}

std::vector<Value*> Emitter::op_n(const std::string& op_type, const std::vector<Value*>& inputs,
                                  int n, std::vector<Attribute> attrs) {
  std::vector<Value*> outs;
  for (int i = 0; i < n; ++i) outs.push_back(g_.add_unique_value(base_ + "/" + op_type));
  add(op_type, inputs, outs, std::move(attrs));
  return outs;
}

Value* Emitter::op(const std::string& op_type, const std::vector<Value*>& inputs,
                   std::vector<Attribute> attrs) {
  return op_n(op_type, inputs, 1, std::move(attrs))[0];
}

Value* Emitter::op_named(const std::string& out, const std::string& op_type,
                         const std::vector<Value*>& inputs, std::vector<Attribute> attrs) {
  Value* v = g_.get_or_add_value(out);
  add(op_type, inputs, {v}, std::move(attrs));
  return v;
}

Value* Emitter::scalar(double v, DataType dt) {
  return g_.add_initializer(g_.add_unique_value(base_ + "/const")->name, scalar_tensor(dt, v));
}

Value* Emitter::ints(const std::vector<int64_t>& v) {
  return g_.add_initializer(g_.add_unique_value(base_ + "/ints")->name,
                            Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
}

Value* Emitter::int_scalar(int64_t v) { return scalar(static_cast<double>(v), DataType::Int64); }

Value* Emitter::input(const std::string& hint, const ValueType& t) {
  Value* v = g_.add_unique_value(hint);
  v->type = t;
  g_.inputs.push_back(v);
  return v;
}

}  // namespace onyx::autodiff
