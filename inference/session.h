// onyx::Session: load an ONNX model once, run it many times (from many threads at once).
//
//   onyx::Session session("model.onnx", {.intra_op_threads = 4});
//   auto out = session.run({{"x", onyx::Tensor::from_vector<float>({1, 3}, {1, 2, 3})}});
//   const float* y = out.at("y").data<float>();
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/autocast.h"
#include "graph/ir.h"
#include "graph/tensor.h"

namespace onyx {

enum class OptLevel { None = 0, Basic = 1, Extended = 2, All = 3 };
/// "none", "basic", "extended", "all" -> OptLevel; onyx::Error otherwise.
OptLevel opt_level_from_name(const std::string& name);

struct SessionOptions {
  /// Threads a kernel may use; 0 means one per core.
  int intra_op_threads = 0;
  /// none: run the graph as loaded; basic: constant folding and dead-code elimination;
  /// extended: + fusions (Conv+BatchNormalization/Add/activation, MatMul over Transpose);
  /// all (the default, as in ONNX Runtime): + channel-blocked (NCHWc) convolution chains.
  OptLevel opt_level = OptLevel::All;
  /// Record one Chrome-trace event per node; written by end_profiling().
  bool profiling = false;
  std::string profile_path = "onyx_profile.json";
  /// trace, debug, info, warn, error, off
  std::string log_level = "warn";
  /// bf16/fp16: matrix products and convolutions run in that format, weights converted once
  /// here, softmax/norms/reductions in float32 (graph/autocast.h's policy table); inputs
  /// and outputs keep their declared float32 types.
  Precision precision = Precision::Float32;
  /// Fusions whose kernel computes an activation by a formula of its own (the tanh GELU
  /// spelling -> FastGelu, an activation as a matrix product's epilogue): results change in
  /// the last bits. Training graphs turn them off, so that a segment recomputed in the
  /// backward pass gives the gradients a plain run gives, bit for bit.
  bool approximate_fusions = true;
  /// 3x3 stride-1 float32 convolutions by Winograd's minimal filtering (oneDNN's F(2x2,3x3) and
  /// F(4x4,3x3) kernels, CPUs with AVX-512, opt level all): 0.4-0.85x the direct kernel's time,
  /// results within ~1e-5 of the outputs' scale of the direct kernel's after a few layers (fewer
  /// multiplications, more roundings), as cuDNN gives in float32. The weights' transform is
  /// paid with the other packs (prepack_weights; kernels/cpu/winograd_weights.h; ResNet-18:
  /// ~70 ms of one core, most of it page faults). Off: direct kernels everywhere,
  /// on the CPU's preferred layout. Training turns it off.
  bool winograd_convolutions = true;
  /// Constant weights of matrix products packed into oneDNN's layout here, at creation, on
  /// every core at once, instead of in the first run (one copy per weight either way). Off:
  /// each weight is packed in the first run that needs it. Either way a float32 product whose
  /// declared shapes allow one row (an MLP's [batch, 784] input, a decoder fed one token at a
  /// time) is packed by its first run with more rows, never at creation: one-row products read
  /// the weights as stored.
  bool prepack_weights = true;
  /// Denormal floats read and written as zero while the session runs (x86 FTZ and DAZ, on the
  /// calling thread and the kernels' threads, each given its previous mode back after the run;
  /// kernels/denormals.h): on Intel CPUs arithmetic on denormals takes a microcode assist per
  /// operation, ~100x its time. Values below 1.2e-38 (float32) become 0. Off by default for
  /// inference, as in ONNX Runtime (its session.set_denormal_as_zero); training graphs turn it
  /// on (TrainingConfig::flush_denormals), as TensorFlow and XLA do on CPUs.
  bool flush_denormals = false;
  /// Execution providers in placement priority order: each node goes to the first one with a
  /// kernel for its op, opset and dtype; "cpu" is the fallback and is appended when missing.
  /// {"cuda", "cpu"} needs a CUDA device (onyx::Error "[cuda] no CUDA device: ..." otherwise).
  /// Copies are inserted as ai.onyx MemcpyFromHost / MemcpyToHost nodes where values cross.
  std::vector<std::string> providers = {"cpu"};
  /// The device index of the non-CPU providers (cuda:device_id).
  int device_id = 0;
};

/// Where one node of the compiled graph runs.
struct NodePlacement {
  std::string node;  // the node's label: "name (OpType)"
  std::string op_type, domain;
  std::string provider;
  /// On the CPU although a device provider was asked for and the node is no host-side shape
  /// computation: that provider has no kernel for it (op, opset or dtype).
  bool fallback = false;
};

/// A graph input or output as declared by the model.
struct IoInfo {
  std::string name;
  ValueType type;  // dtype and (symbolic) shape
};

struct ModelMetadata {
  std::string producer_name, producer_version, domain, doc_string, graph_name;
  int64_t ir_version = 0, model_version = 0;
  std::vector<OpsetImport> opsets;
  std::vector<std::pair<std::string, std::string>> custom;
};

/// Facts about one run.
struct RunStats {
  size_t peak_bytes = 0;      // most intermediate host bytes alive at once
  size_t nodes_run = 0;
  double wall_ms = 0;
  size_t device_peak_bytes = 0;  // the same as peak_bytes in device memory (non-CPU providers)
  /// The devices' caching arenas after the run: bytes held from the device, and the part of
  /// them cached but not in use (free blocks kept for reuse: the arenas' slack).
  size_t device_reserved_bytes = 0;
  size_t device_cached_bytes = 0;
};

/// Per-run settings.
struct RunOptions {
  /// Seed for random ops (Dropout in training mode, Random*): the same seed gives the same
  /// draws. Without one, each random node keeps its own generator across runs.
  std::optional<uint64_t> seed;
  /// Called on the running thread as soon as a graph output has been computed, while later
  /// nodes are still to run (data-parallel training starts a gradient's allreduce here).
  std::function<void(const std::string& name, const Tensor& value)> on_output;
  /// The run ends with an onyx::Error ("[run] cancelled: ...") once this time has passed,
  /// checked before each node, also inside Loop/Scan/If bodies: a model that never finishes
  /// (a Loop whose condition stays true and has no trip count) cannot hang the caller.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// Cancels the run at its next node, with the same error, once set (from any thread).
  const std::atomic<bool>* terminate = nullptr;
  /// Leave outputs a device provider computed in device memory (IoBinding-style: feed them
  /// to the next run without a round trip); by default outputs come back in host memory.
  bool outputs_on_device = false;
  /// Caller memory for graph outputs (as ONNX Runtime's IoBinding binds an output): a graph
  /// output whose kernel allocates a host tensor of exactly the bound tensor's dtype and shape
  /// is computed into it, saving a copy. Any other (a view of an input, another shape, device
  /// memory) comes back in memory of its own, so callers compare the returned tensor's data
  /// pointer with the buffer's; an unbound output that is the same value as a bound one views
  /// the buffer too. The buffers must not be fed, read or written while the run lasts; a run
  /// that fails may have written into them.
  std::map<std::string, Tensor> output_buffers;
};

/// The execution providers usable in this process, in priority order: "cuda" when this build
/// has it and the machine a CUDA device, then "cpu".
std::vector<std::string> available_providers();

using NamedTensors = std::map<std::string, Tensor>;
using NamedValues = std::map<std::string, Datum>;

class Session {
 public:
  /// Loads, validates, optimizes and compiles the model at `path`.
  explicit Session(const std::string& path, const SessionOptions& options = {});
  /// Same from serialized bytes; external data resolves against `base_dir`.
  static Session from_bytes(const void* data, size_t size, const SessionOptions& options = {},
                            const std::string& base_dir = "");
  /// Compiles an already-loaded model (the session takes ownership).
  Session(std::unique_ptr<Model> model, const SessionOptions& options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  /// Runs with `feeds` (checked against the declared inputs: names, dtypes, ranks, fixed
  /// dims) and returns the requested outputs (all when `outputs` is empty). Thread-safe.
  NamedTensors run(const NamedTensors& feeds, const std::vector<std::string>& outputs = {},
                   RunStats* stats = nullptr) const;
  /// As run(), with per-run options.
  NamedTensors run(const NamedTensors& feeds, const std::vector<std::string>& outputs,
                   const RunOptions& run_options, RunStats* stats = nullptr) const;
  /// As run(), for models whose inputs or outputs are sequences or optionals.
  NamedValues run_values(const NamedValues& feeds, const std::vector<std::string>& outputs = {},
                         RunStats* stats = nullptr) const;
  NamedValues run_values(const NamedValues& feeds, const std::vector<std::string>& outputs,
                         const RunOptions& run_options, RunStats* stats = nullptr) const;

  const std::vector<IoInfo>& inputs() const;
  const std::vector<IoInfo>& outputs() const;
  const ModelMetadata& metadata() const;
  /// The optimized graph the session runs (for inspection).
  const Model& model() const;
  /// Every node of the main graph and the provider it runs on, in execution order (copy
  /// nodes included): `onyx inspect --plan`, and tests that a model has no fallback nodes.
  std::vector<NodePlacement> placement() const;
  /// Writes the profile collected so far as Chrome-trace JSON; returns its path.
  std::string end_profiling() const;
  const SessionOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
