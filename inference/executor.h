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

#include "inference/partition.h"
#include "kernels/provider.h"

namespace onyx {

/// One node ready to run: its kernel and the frame slots it reads and writes.
struct Step {
  const Node* node = nullptr;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;        // slot per input; -1 for an omitted input
  std::vector<int> outputs;       // slot per output; -1 for an omitted output
  std::vector<int> release_after; // slots whose last reader is this step
  int provider = 0;               // index into Plan::providers
  /// Per input: the device its tensor must be on (nullopt: any; only the shape is read, or a
  /// copy node that moves it). A tensor elsewhere is a missing copy: an onyx::Error, never a
  /// kernel reading another device's pointer.
  std::vector<std::optional<Device>> input_devices;
  std::vector<bool> host_outputs; // outputs written to host memory (KernelDef::host_outputs)
};

/// A compiled graph (the main graph or a subgraph). Immutable after compile: runs share it.
struct Plan {
  const Graph* graph = nullptr;
  /// The session's providers (CPU last); steps index them. Shared by subplans.
  std::vector<const ExecutionProvider*> providers;
  int num_slots = 0;
  std::vector<Step> steps;
  std::vector<std::pair<int, Tensor>> constants;           // initializer slots
  std::vector<int> input_slots;                            // graph inputs, in order
  std::vector<int> output_slots;                           // graph outputs, in order
  /// Per graph output, the slot whose kernel allocates its memory: output_slots[i], or through
  /// Identity nodes the slot they pass on (RunOptions::output_buffers binds that one).
  std::vector<int> output_sources;
  std::vector<std::pair<std::string, int>> outer_slots;    // filled from enclosing frames
  std::unordered_map<std::string, int> slot_of;            // value name -> slot
  std::unordered_map<const Graph*, std::unique_ptr<Plan>> subplans;
};

/// The registration `provider` has for `node` at the model's opset and the static dtype of
/// its type input, or nullptr (then `why`, when given, says what did not match). `typed`:
/// a registration restricted to some dtypes counts only when the node's dtype is known.
const KernelDef* find_kernel_def(const Node& node, const Model& model, const ExecutionProvider& provider,
                                 std::string* why, bool typed);

/// Builds the plan of `graph` (and its subgraphs, which run on the CPU) with each node's
/// kernel from the provider `placement` gives it. Copies of initializers to a device
/// (MemcpyFromHost of a constant) are done here, once. Throws onyx::NotImplemented naming the
/// node when no kernel exists.
std::unique_ptr<Plan> compile_plan(const Graph& graph, const Model& model, const Placement& placement);

/// Runs Kernel::prepare of every step with a constant input (weights packed ahead of the first
/// run), several at once on up to one thread per core, the largest constants first; the
/// session waits for it at creation. Returns the bytes the kernels allocated and keep; throws
/// the first kernel's error (out of memory named).
size_t prepare_kernels(Plan& plan);

/// One profiled node execution.
struct ProfileEvent {
  std::string name, op;
  std::vector<Shape> input_shapes;
  int64_t start_us = 0, dur_us = 0;
  int tid = 0;
};

/// Per-run settings and results.
struct RunContext {
  std::shared_ptr<Allocator> allocator;  // host memory; counts this run's bytes
  /// Per provider (Plan::providers' order): its memory and its per-run resources (a
  /// stream). Empty: every provider uses `allocator` and has no resources (CPU only).
  std::vector<std::shared_ptr<Allocator>> provider_allocators;
  std::vector<RunResources*> resources;
  /// Per provider: where its kernels' host outputs go (ExecutionProvider::host_allocator), or
  /// nullptr for `allocator`.
  std::vector<std::shared_ptr<Allocator>> provider_host_allocators;
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
  /// RunOptions::output_buffers: where main-graph outputs of matching dtype and shape go.
  const std::map<std::string, Tensor>* output_buffers = nullptr;
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
