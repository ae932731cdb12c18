// The finite-difference harness: every gradient rule is checked in float64 against central
// differences of a random projection of the op's outputs, L = sum_k sum(out_k * R_k).
//
//   check_gradient({.op = "Mul", .inputs = {P("a", {2, 3}), P("b", {3})}});
//
// Inputs marked Param get gradients; Const inputs (indices, shapes, masks) are fixed. The
// analytic gradients come from autodiff::build_training_graph run by onyx::Session; the
// numeric ones from the forward model as given (before any training-time rewrite) with each
// parameter element nudged by +-eps.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autodiff/gradient_rules.h"
#include "autodiff/training_graph.h"
#include "graph/ir.h"
#include "inference/session.h"
#include "test_util.h"  // attr_int, attr_float, attr_ints, attr_string

namespace onyx::test {

struct GradInput {
  std::string name;
  Shape shape;
  bool param = true;                  // differentiate with respect to it
  DataType dtype = DataType::Double;  // Const inputs may be ints, bools
  std::vector<double> values;         // empty: uniform random in [lo, hi]
  double lo = -1, hi = 1;
  bool omitted = false;               // an omitted optional input (placeholder)
};
/// A differentiable float64 input with random values in [lo, hi].
inline GradInput P(std::string n, Shape s, double lo = -1, double hi = 1) {
  return {std::move(n), std::move(s), true, DataType::Double, {}, lo, hi};
}
/// A fixed input of any dtype with given values.
inline GradInput C(std::string n, Shape s, std::vector<double> v, DataType dt = DataType::Int64) {
  return {std::move(n), std::move(s), false, dt, std::move(v)};
}
/// A differentiable input with the given values.
inline GradInput PV(std::string n, Shape s, std::vector<double> v) {
  GradInput g = P(std::move(n), std::move(s));
  g.values = std::move(v);
  return g;
}
/// An omitted optional input.
inline GradInput None() {
  GradInput g;
  g.omitted = true;
  g.param = false;
  return g;
}

struct GradCase {
  std::string op;
  std::vector<GradInput> inputs;
  std::vector<Attribute> attrs;
  int outputs = 1;               // node outputs
  std::vector<int> loss_outputs; // outputs in the projection (empty: output 0)
  int64_t opset = 17;
  /// Other domains the model imports (com.microsoft for its fused ops), with their versions.
  std::vector<std::pair<std::string, int64_t>> domains;
  double eps = 1e-6, rtol = 1e-5, atol = 1e-7;
  uint64_t seed = 1;
  /// Seed for random ops (Dropout) passed to every Session::run, so all runs draw alike.
  std::optional<uint64_t> run_seed;
  /// Optional: builds a multi-node forward graph instead of one `op` node. It gets the
  /// graph with the inputs already added as initializers and returns the outputs to project.
  std::function<std::vector<Value*>(Graph&)> build;
};

/// For GradCase.build: adds one `op` node with a fresh output to `g` and returns it.
inline Value* add(Graph& g, const std::string& op, const std::vector<Value*>& ins,
                  std::vector<Attribute> attrs = {}) {
  Value* y = g.add_unique_value(op + "_y");
  Node* n = g.add_node(op, ins, {y}, "", fmt::format("{}_{}", op, g.num_nodes()));
  for (auto& a : attrs) n->attrs[a.name] = a;
  return y;
}

/// For GradCase.build: one `op` node over the values named `ins` ("" = omitted input) with
/// outputs <name>_y0..y{n_out-1}, where name defaults to op + node count; returns the outputs.
inline std::vector<Value*> node(Graph& g, const std::string& op,
                                const std::vector<std::string>& ins, std::vector<Attribute> attrs,
                                int n_out = 1, const std::string& name = "") {
  std::vector<Value*> in, out;
  for (const auto& s : ins) in.push_back(s.empty() ? nullptr : g.find_value(s));
  std::string base = name.empty() ? op + std::to_string(g.num_nodes()) : name;
  for (int i = 0; i < n_out; ++i)
    out.push_back(g.get_or_add_value(base + "_y" + std::to_string(i)));
  Node* nd = g.add_node(op, in, out, "", base);
  for (auto& a : attrs) nd->attrs[a.name] = a;
  return out;
}

/// A float or double tensor (by `dt`) holding `v`.
inline Tensor float_tensor(DataType dt, const Shape& shape, const std::vector<double>& v) {
  return dt == DataType::Double ? T_<double>(shape, v) : T_<float>(shape, v);
}

/// How many nodes of `op` a session's compiled graph holds (what a fusion left).
inline size_t count_ops(const Session& s, const std::string& op) {
  size_t n = 0;
  for (const Node* node : s.model().graph->topological_order()) n += node->op_type == op;
  return n;
}

/// The feeds of the norm-gradient fusion tests: `in` and `r` of `shape`, smooth and distinct.
inline NamedTensors in_and_r_feeds(const Shape& shape, DataType dt) {
  NamedTensors feeds;
  for (const char* name : {"in", "r"}) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = std::cos((name[0] == 'i' ? 1.3 : 0.45) * static_cast<double>(i)) * 3.0 + 1.0;
    feeds[name] = float_tensor(dt, shape, v);
  }
  return feeds;
}

/// Builds the forward model (inputs as initializers), the projection loss, the training
/// graph, and compares analytic with numeric gradients for every Param element.
void check_gradient(const GradCase& gc);

/// The single-op case `gc` run in float32: its float64 inputs are Cast to float32 for the op
/// and its outputs Cast back, so the rule emits float32 nodes; checked to float32 accuracy.
GradCase in_float32(GradCase gc);

}  // namespace onyx::test
