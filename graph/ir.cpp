#include "graph/ir.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

namespace onyx {

std::string Dim::str() const {
  if (is_fixed()) return std::to_string(value);
  return param.empty() ? "?" : param;
}

std::string sym_shape_str(const SymShape& s) {
  std::vector<std::string> parts;
  for (const auto& d : s) parts.push_back(d.str());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string ValueType::str() const {
  switch (kind) {
    case Kind::Tensor:
      return fmt::format("tensor({}){}", dtype_name(elem), shape ? sym_shape_str(*shape) : "");
    case Kind::SparseTensor: return fmt::format("sparse_tensor({})", dtype_name(elem));
    case Kind::Sequence: return fmt::format("seq({})", inner ? inner->str() : "?");
    case Kind::Optional: return fmt::format("optional({})", inner ? inner->str() : "?");
    case Kind::Map:
      return fmt::format("map({}, {})", dtype_name(key), inner ? inner->str() : "?");
    default: return "unknown";
  }
}

std::string attr_type_name(Attribute::Type t) {
  static const char* names[] = {"undefined", "float",  "int",     "string",        "tensor",
                                "graph",     "floats", "ints",    "strings",       "tensors",
                                "graphs",    "sparse_tensor",     "sparse_tensors", "type_proto",
                                "type_protos"};
  auto i = static_cast<size_t>(t);
  return i < std::size(names) ? names[i] : "attribute#" + std::to_string(i);
}

const Attribute* Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  return it == attrs.end() ? nullptr : &it->second;
}

std::string Node::label() const {
  return name.empty() ? fmt::format("{} node", op_type) : fmt::format("{} node '{}'", op_type, name);
}

const Attribute& Node::require_attr(const std::string& n, Attribute::Type t) const {
  const Attribute* a = attr(n);
  ONYX_CHECK(a, "[{}] missing required attribute '{}'", label(), n);
  ONYX_CHECK(a->type == t, "[{}] attribute '{}' should be {} but is {}", label(), n,
             attr_type_name(t), attr_type_name(a->type));
  return *a;
}

namespace {
const Attribute* typed(const Node& node, const std::string& n, Attribute::Type t) {
  const Attribute* a = node.attr(n);
  if (!a) return nullptr;
  ONYX_CHECK(a->type == t, "[{}] attribute '{}' should be {} but is {}", node.label(), n,
             attr_type_name(t), attr_type_name(a->type));
  return a;
}
}  // namespace

int64_t Node::attr_int(const std::string& n, int64_t def) const {
  const Attribute* a = typed(*this, n, Attribute::Type::Int);
  return a ? a->i : def;
}
float Node::attr_float(const std::string& n, float def) const {
  const Attribute* a = attr(n);
  if (a && a->type == Attribute::Type::Int) return static_cast<float>(a->i);
  a = typed(*this, n, Attribute::Type::Float);
  return a ? a->f : def;
}
std::string Node::attr_string(const std::string& n, const std::string& def) const {
  const Attribute* a = typed(*this, n, Attribute::Type::String);
  return a ? a->s : def;
}
std::vector<int64_t> Node::attr_ints(const std::string& n, const std::vector<int64_t>& def) const {
  const Attribute* a = typed(*this, n, Attribute::Type::Ints);
  return a ? a->ints : def;
}
std::vector<float> Node::attr_floats(const std::string& n, const std::vector<float>& def) const {
  const Attribute* a = typed(*this, n, Attribute::Type::Floats);
  return a ? a->floats : def;
}
std::vector<std::string> Node::attr_strings(const std::string& n,
                                            const std::vector<std::string>& def) const {
  const Attribute* a = typed(*this, n, Attribute::Type::Strings);
  return a ? a->strings : def;
}

Value* Graph::find_value(const std::string& n) const {
  auto it = values_.find(n);
  return it == values_.end() ? nullptr : it->second.get();
}

Value* Graph::get_or_add_value(const std::string& n) {
  auto& slot = values_[n];
  if (!slot) {
    slot = std::make_unique<Value>();
    slot->name = n;
    slot->owner = this;
  }
  return slot.get();
}

Value* Graph::add_unique_value(const std::string& hint) {
  auto taken = [&](const std::string& n) {
    for (const Graph* g = this; g; g = g->parent)
      if (g->values_.count(n)) return true;
    return false;
  };
  std::string n;
  do {
    n = fmt::format("{}__{}", hint, unique_counter_++);
  } while (taken(n));
  return get_or_add_value(n);
}

Value* Graph::add_initializer(const std::string& n, Tensor t) {
  Value* v = get_or_add_value(n);
  v->type = ValueType::tensor(t.dtype(), SymShape{});
  v->type.shape->clear();
  for (int64_t d : t.shape()) v->type.shape->push_back(Dim::fixed(d));
  initializers[n] = std::move(t);
  return v;
}

const Tensor* Graph::initializer(const Value* v) const {
  if (!v) return nullptr;
  auto it = initializers.find(v->name);
  return it == initializers.end() ? nullptr : &it->second;
}

Node* Graph::add_node(std::string op_type, std::vector<Value*> ins, std::vector<Value*> outs,
                      std::string domain, std::string name) {
  auto node = std::make_unique<Node>();
  node->op_type = std::move(op_type);
  node->domain = canonical_domain(domain);
  node->name = std::move(name);
  node->owner = this;
  node->inputs = std::move(ins);
  node->outputs = std::move(outs);
  Node* n = node.get();
  for (int i = 0; i < n->num_inputs(); ++i)
    if (n->inputs[i]) n->inputs[i]->consumers.emplace_back(n, i);
  for (size_t i = 0; i < n->outputs.size(); ++i) {
    Value* v = n->outputs[i];
    if (!v) continue;
    ONYX_CHECK(!v->producer, "[graph '{}'] value '{}' is produced by both {} and {}", name,
               v->name, v->producer->label(), n->label());
    v->producer = n;
    v->producer_output = static_cast<int>(i);
  }
  nodes_.push_back(std::move(node));
  return n;
}

void Graph::set_input(Node* n, int idx, Value* v) {
  Value* old = n->inputs[idx];
  if (old) {
    auto& c = old->consumers;
    c.erase(std::remove(c.begin(), c.end(), std::make_pair(n, idx)), c.end());
  }
  n->inputs[idx] = v;
  if (v) v->consumers.emplace_back(n, idx);
}

void Graph::add_implicit_input(Node* n, Value* v) {
  n->implicit_inputs.push_back(v);
  v->consumers.emplace_back(n, -1);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  auto consumers = from->consumers;
  for (auto [n, i] : consumers) {
    if (i >= 0) {
      set_input(n, i, to);
      continue;
    }
    auto& c = from->consumers;
    c.erase(std::remove(c.begin(), c.end(), std::make_pair(n, i)), c.end());
    for (auto& v : n->implicit_inputs)
      if (v == from) v = to;
    to->consumers.emplace_back(n, -1);
  }
  for (auto& o : outputs)
    if (o == from) o = to;
}

void Graph::remove_node(Node* n) {
  for (int i = 0; i < n->num_inputs(); ++i) set_input(n, i, nullptr);
  for (Value* v : n->implicit_inputs) {
    auto& c = v->consumers;
    c.erase(std::remove(c.begin(), c.end(), std::make_pair(n, -1)), c.end());
  }
  n->implicit_inputs.clear();
  for (Value* v : n->outputs)
    if (v && v->producer == n) {
      v->producer = nullptr;
      v->producer_output = -1;
    }
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [n](const auto& p) { return p.get() == n; });
  if (it != nodes_.end()) nodes_.erase(it);
}

void Graph::prune_values() {
  std::unordered_set<const Value*> keep(inputs.begin(), inputs.end());
  keep.insert(outputs.begin(), outputs.end());
  for (auto it = values_.begin(); it != values_.end();) {
    Value* v = it->second.get();
    bool used = keep.count(v) || v->producer || !v->consumers.empty() || initializers.count(v->name);
    it = used ? std::next(it) : values_.erase(it);
  }
}

std::vector<Node*> Graph::topological_order() const {
  // Kahn's algorithm, stable with respect to the stored order.
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node* n = nodes_[i].get();
    position[n] = i;
    std::set<const Node*> deps;
    for (Value* v : n->inputs)
      if (v && v->producer && v->producer->owner == this) deps.insert(v->producer);
    for (Value* v : n->implicit_inputs)
      if (v->producer && v->producer->owner == this) deps.insert(v->producer);
    pending[n] = static_cast<int>(deps.size());
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  std::set<std::pair<size_t, Node*>> ready;
  for (const auto& n : nodes_)
    if (pending[n.get()] == 0) ready.emplace(position[n.get()], n.get());
  while (!ready.empty()) {
    Node* n = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(n);
    std::set<Node*> seen;
    for (Value* v : n->outputs) {
      if (!v) continue;
      for (auto [c, idx] : v->consumers) {
        (void)idx;
        if (c->owner != this || !seen.insert(c).second) continue;
        if (--pending[c] == 0) ready.emplace(position[c], c);
      }
    }
  }
  if (order.size() != nodes_.size()) {
    std::vector<std::string> stuck;
    for (const auto& n : nodes_)
      if (pending[n.get()] > 0 && stuck.size() < 5) stuck.push_back(n->label());
    ONYX_THROW("[graph '{}'] has a cycle: {} nodes can never run (e.g. {})", name,
               nodes_.size() - order.size(), fmt::join(stuck, ", "));
  }
  return order;
}

void Graph::sort_topologically() {
  auto order = topological_order();
  std::unordered_map<Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) nodes_.push_back(std::move(owned[n]));
}

std::vector<std::string> Graph::outer_scope_names() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto visit = [&](const std::string& n) {
    const Value* v = find_value(n);
    bool local = v && (v->producer || initializers.count(n) ||
                       std::find(inputs.begin(), inputs.end(), v) != inputs.end());
    if (!local && seen.insert(n).second) out.push_back(n);
  };
  for (const auto& node : nodes_) {
    for (Value* v : node->inputs)
      if (v) visit(v->name);
    for (const auto& [an, a] : node->attrs) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs)
        for (const auto& n : sg->outer_scope_names()) visit(n);
    }
  }
  for (Value* v : outputs) visit(v->name);
  return out;
}

int64_t Model::opset(const std::string& d) const {
  std::string cd = canonical_domain(d);
  for (const auto& o : opsets)
    if (canonical_domain(o.domain) == cd) return o.version;
  return 0;
}

std::string canonical_domain(const std::string& domain) {
  return domain == "ai.onnx" ? std::string() : domain;
}

}  // namespace onyx
