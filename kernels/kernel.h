// The kernel interface: a Kernel is built once per node when a session is created
// (attributes parsed there) and its const compute() may run concurrently for many runs.
#pragma once

#include <climits>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace onyx {

/// What a kernel sees while it runs: its inputs, where to put outputs, scratch memory,
/// its thread budget, and a way to run subgraphs (If/Loop/Scan bodies).
class KernelContext {
 public:
  virtual ~KernelContext() = default;

  virtual const Node& node() const = 0;
  virtual int num_inputs() const = 0;
  /// Input i as a runtime value, or nullptr when the optional input is omitted.
  virtual const Datum* input_datum(int i) const = 0;
  virtual int num_outputs() const = 0;
  /// False when output i is omitted in the graph (the kernel may skip computing it).
  virtual bool output_wanted(int i) const = 0;
  /// Allocates output i from the session's arena; the kernel fills it.
  virtual Tensor& allocate_output(int i, DataType dtype, const Shape& shape) = 0;
  /// Sets output i to an existing value (views of inputs, sequences, optionals).
  virtual void set_output(int i, Datum value) = 0;
  /// Temporary buffer from the arena, returned when the Tensor dies.
  virtual Tensor scratch(DataType dtype, const Shape& shape) = 0;
  /// Threads this kernel may use (the session's intra-op thread count).
  virtual int threads() const = 0;
  /// Runs subgraph `g` (an attribute of this node) with `inputs` bound to its graph inputs;
  /// values of enclosing scopes are visible. Returns its outputs in order.
  virtual std::vector<Datum> run_subgraph(const Graph& g, const std::vector<Datum>& inputs) = 0;
  /// The run's random seed when the caller gave one (training steps do): random kernels
  /// then draw from it (mixed with their node name) instead of their own generator, so a
  /// run is reproducible and a resumed training continues the same random sequence.
  virtual std::optional<uint64_t> run_seed() const { return std::nullopt; }
  /// The native stream of this run on the kernel's provider (a cudaStream_t), nullptr on CPU.
  virtual void* stream() const { return nullptr; }

  /// Input i as a tensor; nullptr when omitted; onyx::Error when it is not a tensor.
  const Tensor* input(int i) const;
  /// Input i as a tensor; onyx::Error naming the node when omitted.
  const Tensor& required_input(int i) const;
  std::string label() const { return node().label(); }
};

/// Input i, or nullptr when omitted or beyond the node's inputs (trailing optional inputs
/// may be left out of the node altogether).
inline const Tensor* opt_input(const KernelContext& ctx, int i) {
  return i < ctx.num_inputs() ? ctx.input(i) : nullptr;
}

/// What a kernel factory gets at session creation.
struct KernelInfo {
  const Node& node;
  int64_t opset;       // opset the model imports for the node's domain
  const Graph& graph;  // the node's graph (for initializers known before any run)

  /// Input i's value when it is an initializer (known at creation time), else nullptr.
  const Tensor* constant_input(int i) const;
  std::string label() const { return node.label(); }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Computes outputs from inputs. Must be thread-safe: one kernel serves concurrent runs.
  virtual void compute(KernelContext& ctx) const = 0;
  /// Work done once at session creation, before any run, from the node's constant inputs
  /// (weights packed into the layout a library reads), so that the first run does not pay for
  /// it. The session runs several kernels' prepare() at once, one per thread, each with
  /// `threads` (1 then) for its own loops: it may touch only this kernel's state. Returns the
  /// bytes it allocated and keeps. Optional: whatever it leaves undone, compute() does on
  /// first use as before.
  virtual size_t prepare(int threads) {
    (void)threads;
    return 0;
  }
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelInfo&)>;

/// One registration: an op over an opset range for a set of dtypes on one provider.
struct KernelDef {
  std::string op_type;
  std::string domain;  // "" is ai.onnx
  int since = 1;
  int until = INT_MAX;         // inclusive
  std::string provider = "cpu";
  int type_input = 0;          // input whose dtype must be in `types` (-1: no check)
  std::vector<DataType> types; // empty: any dtype
  KernelFactory create;
  // Where the kernel wants its operands (the session inserts copies to match). By default
  // every input and output is in the provider's memory. A device kernel reads shape-like
  // operands (Reshape's shape, Slice's starts) on the host; Shape and Size read only an
  // input's shape, wherever it lives; a copy to the host writes host memory.
  std::vector<int> host_inputs;
  std::vector<int> shape_only_inputs;
  std::vector<int> host_outputs;
};

class KernelRegistry {
 public:
  void add(KernelDef def);
  /// The registration for op/domain/opset/provider accepting `dtype` (Undefined: any), or
  /// nullptr; then `why` (if given) says what did not match.
  const KernelDef* find(const std::string& op, const std::string& domain, int64_t opset,
                        const std::string& provider, DataType dtype, std::string* why = nullptr) const;
  const std::vector<KernelDef>& defs() const { return defs_; }

 private:
  std::vector<KernelDef> defs_;
};

/// Factory for a kernel class constructed from KernelInfo.
template <typename K>
KernelFactory make_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); };
}

/// A kernel written as one function; for ops with no per-node state.
class FunctionKernel final : public Kernel {
 public:
  using Fn = std::function<void(KernelContext&)>;
  explicit FunctionKernel(Fn fn) : fn_(std::move(fn)) {}
  void compute(KernelContext& ctx) const override { fn_(ctx); }

 private:
  Fn fn_;
};

/// Factory wrapping a stateless compute function.
KernelFactory function_factory(FunctionKernel::Fn fn);

// Common dtype sets for registrations.
std::vector<DataType> float_types();        // float, double, float16, bfloat16
std::vector<DataType> signed_int_types();   // int8..int64
std::vector<DataType> unsigned_int_types(); // uint8..uint64
std::vector<DataType> int_types();          // signed + unsigned
std::vector<DataType> numeric_types();      // float + int
std::vector<DataType> all_types();          // numeric + bool + string
std::vector<DataType> operator+(std::vector<DataType> a, const std::vector<DataType>& b);

}  // namespace onyx
