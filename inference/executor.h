// Compiling a graph into an execution plan (kernels, value slots, lifetimes) and running it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/provider.h"

namespace onyx {

/// One node ready to run: its kernel and the frame slots it reads and writes.
struct Step {
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;        // slot per input; -1 for an omitted input
  std::vector<int> outputs;       // slot per output; -1 for an omitted output
  std::vector<int> release_after; // slots whose last reader is this step
};

/// A compiled graph (the main graph or a subgraph). Immutable after compile: runs share it.
struct Plan {
  const Graph* graph = nullptr;
  int num_slots = 0;
  std::vector<Step> steps;
  std::vector<std::pair<int, Tensor>> constants;           // initializer slots
  std::vector<int> input_slots;                            // graph inputs, in order
  std::vector<int> output_slots;                           // graph outputs, in order
  std::vector<std::pair<std::string, int>> outer_slots;    // filled from enclosing frames
  std::unordered_map<std::string, int> slot_of;            // value name -> slot
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> subplans;
};

/// Builds the plan of `graph` (and its subgraphs) with kernels from `provider`.
/// Throws onyx::NotImplemented naming the node when no kernel exists.
std::unique_ptr<Plan> compile_plan(const Graph& graph, const Model& model,
                                   const ExecutionProvider& provider);

/// One profiled node execution.
struct ProfileEvent {
  std::string name, op;
  std::vector<Shape> input_shapes;
  int64_t start_us = 0, dur_us = 0;
  int tid = 0;
};

/// Per-run settings and results.
struct RunContext {
  std::shared_ptr<Allocator> allocator;  // counts this run's bytes
  int threads = 1;
  bool profile = false;
  std::chrono::steady_clock::time_point epoch;
  std::vector<ProfileEvent> events;
  size_t nodes_run = 0;
  std::optional<uint64_t> seed;  // RunOptions::seed
  /// RunOptions::on_output: told about each main-graph output when its node finishes.
  std::function<void(const std::string&, const Tensor&)> on_output;
  /// RunOptions::deadline and terminate: checked before each node of every plan.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  const std::atomic<bool>* terminate = nullptr;
};

/// The values of one execution of a plan.
struct Frame {
  const Plan* plan = nullptr;
  std::vector<Datum> slots;
  const Frame* parent = nullptr;
  /// Finds `name` in this frame or an enclosing one.
  const Datum* lookup(const std::string& name) const;
};

/// Runs `plan` with `inputs` bound to its graph inputs; returns the graph outputs.
std::vector<Datum> execute_plan(const Plan& plan, std::vector<Datum> inputs, const Frame* parent,
                                RunContext& rc);

/// Runs a single node on given inputs (constant folding); returns its outputs.
std::vector<Datum> evaluate_node(const Node& node, const Model& model, const Graph& graph,
                                 const ExecutionProvider& provider, const std::vector<Datum>& inputs);

}  // namespace onyx
