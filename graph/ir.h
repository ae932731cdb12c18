// The in-memory graph: Model owns a Graph; a Graph owns its Nodes and Values; every
// Value has at most one producer. Subgraphs (If/Loop/Scan bodies) are Graphs owned by
// attributes and may read values of enclosing graphs by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/tensor.h"

namespace onyx {

class Graph;
class Node;

/// One dimension: a fixed size, a named symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;
  std::string param;
  bool is_fixed() const { return value >= 0; }
  static Dim fixed(int64_t v) { return Dim{v, {}}; }
  static Dim symbol(std::string p) { return Dim{-1, std::move(p)}; }
  bool operator==(const Dim&) const = default;
  std::string str() const;
};
using SymShape = std::vector<Dim>;
std::string sym_shape_str(const SymShape& s);

/// Static type of a value: a tensor (dtype + maybe shape), a sequence or an optional.
struct ValueType {
  enum class Kind { Unknown, Tensor, Sequence, Optional, Map, SparseTensor };
  Kind kind = Kind::Unknown;
  DataType elem = DataType::Undefined;     // tensors and sparse tensors
  std::optional<SymShape> shape;           // nullopt: rank unknown
  std::shared_ptr<ValueType> inner;        // sequence / optional element, map value
  DataType key = DataType::Undefined;      // map key

  static ValueType tensor(DataType dt, std::optional<SymShape> shape = std::nullopt) {
    ValueType t;
    t.kind = Kind::Tensor;
    t.elem = dt;
    t.shape = std::move(shape);
    return t;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  std::string str() const;
};

class Value {
 public:
  std::string name;
  ValueType type;
  Node* producer = nullptr;
  int producer_output = -1;
  /// (consumer, input index) pairs, kept up to date by Graph's editing methods.
  std::vector<std::pair<Node*, int>> consumers;
  Graph* owner = nullptr;
};

struct Attribute {
  enum class Type {
    Undefined = 0, Float = 1, Int = 2, String = 3, Tensor = 4, Graph = 5, Floats = 6, Ints = 7,
    Strings = 8, Tensors = 9, Graphs = 10, SparseTensor = 11, SparseTensors = 12,
    TypeProto = 13, TypeProtos = 14,
  };
  std::string name;
  Type type = Type::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  onyx::Tensor t;
  std::shared_ptr<onyx::Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<onyx::Tensor> tensors;
  std::vector<std::shared_ptr<onyx::Graph>> graphs;
  std::vector<ValueType> type_protos;
  /// In a function body: the caller's attribute this one refers to.
  std::string ref_attr_name;
  /// Serialized proto for kinds held but not interpreted (sparse tensors).
  std::string opaque;

  /// Attributes built in one expression, for passes, gradient rules and tests.
  static Attribute of_int(std::string name, int64_t v) {
    Attribute a = named(std::move(name), Type::Int);
    a.i = v;
    return a;
  }
  static Attribute of_float(std::string name, double v) {
    Attribute a = named(std::move(name), Type::Float);
    a.f = static_cast<float>(v);
    return a;
  }
  static Attribute of_string(std::string name, std::string v) {
    Attribute a = named(std::move(name), Type::String);
    a.s = std::move(v);
    return a;
  }
  static Attribute of_ints(std::string name, std::vector<int64_t> v) {
    Attribute a = named(std::move(name), Type::Ints);
    a.ints = std::move(v);
    return a;
  }
  static Attribute of_floats(std::string name, std::vector<float> v) {
    Attribute a = named(std::move(name), Type::Floats);
    a.floats = std::move(v);
    return a;
  }

 private:
  static Attribute named(std::string name, Type type) {
    Attribute a;
    a.name = std::move(name);
    a.type = type;
    return a;
  }
};
std::string attr_type_name(Attribute::Type t);

class Node {
 public:
  std::string name, op_type, domain;  // domain "" is ai.onnx
  std::vector<Value*> inputs;         // nullptr marks an omitted optional input
  std::vector<Value*> outputs;        // nullptr marks an omitted optional output
  /// Values of this node's graph that its subgraphs read by name (If/Loop/Scan bodies).
  /// Registered as consumers with input index -1.
  std::vector<Value*> implicit_inputs;
  std::map<std::string, Attribute> attrs;
  std::string doc_string;
  Graph* owner = nullptr;

  bool has_attr(const std::string& n) const { return attrs.count(n) != 0; }
  const Attribute* attr(const std::string& n) const;
  /// Typed getters: the default when absent; onyx::Error when present with another type.
  int64_t attr_int(const std::string& n, int64_t def) const;
  float attr_float(const std::string& n, float def) const;
  std::string attr_string(const std::string& n, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& n, const std::vector<int64_t>& def = {}) const;
  std::vector<float> attr_floats(const std::string& n, const std::vector<float>& def = {}) const;
  std::vector<std::string> attr_strings(const std::string& n,
                                        const std::vector<std::string>& def = {}) const;
  /// Required attribute; onyx::Error naming the node when absent.
  const Attribute& require_attr(const std::string& n, Attribute::Type t) const;

  int num_inputs() const { return static_cast<int>(inputs.size()); }
  /// True when input i exists and is not omitted.
  bool has_input(int i) const { return i < num_inputs() && inputs[i] != nullptr; }
  /// "Conv node 'conv1'" for error messages.
  std::string label() const;
};

class Graph {
 public:
  explicit Graph(std::string name = "", Graph* parent = nullptr) : name(std::move(name)), parent(parent) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  std::string name, doc_string;
  Graph* parent = nullptr;  // enclosing graph of a subgraph
  std::vector<Value*> inputs;   // fed at run time (initializers excluded)
  std::vector<Value*> outputs;
  std::unordered_map<std::string, Tensor> initializers;
  /// Initializers also listed as graph inputs (IR < 4 style): a feed may override them.
  std::vector<std::string> overridable_initializers;
  /// Optional shape/type annotations for intermediate values are stored on the values.

  /// The value named `n` in this graph, or nullptr.
  Value* find_value(const std::string& n) const;
  /// The value named `n`, created (untyped) when missing.
  Value* get_or_add_value(const std::string& n);
  /// A new value with a name unique in this graph and the graphs enclosing it (so a new
  /// subgraph value never shadows an outer one), derived from `hint`.
  Value* add_unique_value(const std::string& hint);
  /// Adds an initializer (and its value); replaces one of the same name.
  Value* add_initializer(const std::string& n, Tensor t);
  bool is_initializer(const Value* v) const { return v && initializers.count(v->name); }
  const Tensor* initializer(const Value* v) const;

  /// Appends a node; wires producer/consumer links. Outputs must not already have a producer.
  Node* add_node(std::string op_type, std::vector<Value*> inputs, std::vector<Value*> outputs,
                 std::string domain = "", std::string name = "");
  /// Replaces input `idx` of `n`, keeping consumer lists right.
  void set_input(Node* n, int idx, Value* v);
  /// Records that a subgraph of `n` reads `v` from this graph.
  void add_implicit_input(Node* n, Value* v);
  /// Redirects every consumer (and graph output) of `from` to `to`.
  void replace_all_uses(Value* from, Value* to);
  /// Removes a node; its outputs lose their producer.
  void remove_node(Node* n);
  /// Drops values that nothing produces, consumes or lists.
  void prune_values();

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t num_nodes() const { return nodes_.size(); }
  /// Nodes in an order where producers precede consumers; onyx::Error on a cycle.
  std::vector<Node*> topological_order() const;
  /// Reorders nodes_ topologically.
  void sort_topologically();
  /// Names this graph reads from enclosing graphs (recursively through its subgraphs).
  std::vector<std::string> outer_scope_names() const;
  const std::unordered_map<std::string, std::unique_ptr<Value>>& values() const { return values_; }

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, std::unique_ptr<Value>> values_;
  int64_t unique_counter_ = 0;
};

struct OpsetImport {
  std::string domain;  // "" for ai.onnx
  int64_t version = 0;
};

class Model {
 public:
  int64_t ir_version = 0;
  std::vector<OpsetImport> opsets;
  std::string producer_name, producer_version, domain, doc_string;
  int64_t model_version = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::unique_ptr<Graph> graph;
  /// Folder external data is resolved against ("" when loaded from bytes without one).
  std::string base_dir;

  /// Opset version imported for `domain` ("" and "ai.onnx" are the same); 0 if none.
  int64_t opset(const std::string& domain) const;
};

/// Normalises "ai.onnx" to "".
std::string canonical_domain(const std::string& domain);

}  // namespace onyx
