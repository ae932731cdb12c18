// Subgraph plumbing for the rules that build If branches and Loop bodies: copying graphs
// and nodes between scopes, and keeping a node's implicit inputs in step with what its
// subgraphs read from the enclosing graph.
#pragma once

#include <memory>
#include <string>

#include "graph/ir.h"

namespace onyx::autodiff {

/// A deep copy of `src` (values with their types, initializers, nodes, nested subgraphs) as
/// a subgraph of `parent`.
std::shared_ptr<Graph> clone_graph(const Graph& src, Graph* parent);

/// Adds a copy of `n` (a node of another graph) to `g`: values are matched by name (new ones
/// take the source's types), subgraph attributes are deep-copied into `g`'s scope.
Node* copy_node(Graph& g, const Node& n);

/// Sets n's implicit inputs to the values of `g` (n's graph) its subgraphs read by name.
void update_implicit_inputs(Graph& g, Node* n);

/// `sub`'s value standing for the outer value `v` (read by name), typed like `v`.
/// onyx::Error if `sub` defines a value of that name itself.
Value* outer_ref(Graph& sub, const Value* v);

/// Attribute holding a subgraph.
Attribute graph_attr(const std::string& name, std::shared_ptr<Graph> g);

/// A scalar tensor of dtype `dt` holding v.
Tensor scalar_tensor(DataType dt, double v);

/// Emits nodes into a graph being built (GradContext emits into the forward node's graph):
/// fresh value and node names derived from `base`.
class Emitter {
 public:
  Emitter(Graph& g, std::string base) : g_(g), base_(std::move(base)) {}
  Graph& graph() { return g_; }
  std::vector<Value*> op_n(const std::string& op_type, const std::vector<Value*>& inputs, int n,
                           std::vector<Attribute> attrs = {});
  Value* op(const std::string& op_type, const std::vector<Value*>& inputs,
            std::vector<Attribute> attrs = {});
  /// A node whose one output is the value named `out` (created when missing).
  Value* op_named(const std::string& out, const std::string& op_type,
                  const std::vector<Value*>& inputs, std::vector<Attribute> attrs = {});
  /// Constants (initializers of the graph).
  Value* scalar(double v, DataType dt);
  Value* ints(const std::vector<int64_t>& v);
  Value* int_scalar(int64_t v);
  /// A new graph input of type t.
  Value* input(const std::string& hint, const ValueType& t);

 private:
  Node* add(const std::string& op_type, const std::vector<Value*>& inputs,
            const std::vector<Value*>& outs, std::vector<Attribute> attrs);
  Graph& g_;
  std::string base_;
};

}  // namespace onyx::autodiff
