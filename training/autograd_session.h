// onyx::AutogradSession: an ONNX model as a differentiable function, for callers that own
// the loss, the optimizer and the parameters' memory (libtorch autograd in interop/, the
// Python package's onyx.torch.wrap).
//
//   onyx::AutogradSession fn(std::move(model), {.parameters = {"fc.weight", "fc.bias"}});
//   auto fwd = fn.forward({x}, {w, b}, {}, {.training = true, .need_grad = true});
//   // ... the caller computes dL/d(outputs) ...
//   auto g = fn.backward(*fwd.saved, {dy});   // g.params[0] is dL/d(fc.weight)
//
// The caller feeds the parameters and buffers on every call (zero-copy views of its own
// memory: torch parameters, numpy arrays), so its optimizer updates them in place and onyx
// never holds a stale copy. Training and evaluation modes are two compiled graph pairs, built
// on first use: training mode runs Dropout and BatchNormalization as in training (batch
// statistics; the new running statistics come back as state updates for the caller's
// buffers), evaluation mode runs them as in inference. The backward graph reads only the
// activations the forward saved for it (autodiff::build_backward_graphs).
//
// Thread-safe: forward/backward may run concurrently (each call's state is its own).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "graph/ir.h"
#include "graph/tensor.h"
#include "inference/session.h"

namespace onyx {

struct AutogradOptions {
  /// Initializers the caller feeds and wants gradients for, in its order (each a float
  /// tensor). Empty: every float initializer of rank >= 1 that is not a buffer.
  std::vector<std::string> parameters;
  /// Initializers the caller feeds without gradients (BatchNormalization running statistics),
  /// in its order. Training-mode forwards return their new values as state updates.
  std::vector<std::string> buffers;
  /// Update BatchNormalization's running variance as PyTorch does (unbiased batch variance)
  /// instead of as the ONNX specification says (biased): what the torch front doors set.
  bool unbiased_running_var = false;
  /// Intra-op threads; 0 means one per core.
  int threads = 0;
  /// Graph optimization of the compiled forward and backward graphs.
  OptLevel opt_level = OptLevel::All;
  /// bf16/fp16: matrix products and convolutions of forward and backward in that format, the
  /// rest per graph/autocast.h's policy; inputs, outputs, parameters and their gradients stay
  /// float32 (no loss scaling here: the caller owns the loss, e.g. torch.amp.GradScaler).
  Precision precision = Precision::Float32;
};

struct ForwardOptions {
  /// Dropout active, BatchNormalization on batch statistics (with state updates).
  bool training = false;
  /// Keep what backward() needs. False runs the plain forward graph (torch.no_grad()).
  bool need_grad = true;
  /// Seed for Dropout; without one each call draws new masks.
  std::optional<uint64_t> seed;
};

class AutogradSession {
 public:
  /// What one forward kept for its backward: the saved activations and the parameter views
  /// the backward reads. Opaque; share it with the autograd node of the call.
  struct Saved;

  struct ForwardResult {
    std::vector<Tensor> outputs;  // in output_names() order
    std::shared_ptr<const Saved> saved;  // null unless need_grad
    /// Training mode: (buffer name, its new value) for each buffer the forward updated.
    std::vector<std::pair<std::string, Tensor>> state_updates;
  };

  struct Gradients {
    /// One per model input; an empty Tensor (no storage) where the input is not a float tensor
    /// or does not reach any output.
    std::vector<Tensor> inputs;
    /// One per parameter, zeros where it does not reach any output.
    std::vector<Tensor> params;
  };

  /// onyx::Error when a parameter or buffer is not a float initializer of the model, or a name
  /// is listed twice.
  AutogradSession(std::unique_ptr<Model> forward, const AutogradOptions& options = {});
  ~AutogradSession();
  AutogradSession(AutogradSession&&) noexcept;
  AutogradSession& operator=(AutogradSession&&) noexcept;

  const std::vector<IoInfo>& inputs() const;
  const std::vector<IoInfo>& outputs() const;
  const std::vector<std::string>& parameter_names() const;
  const std::vector<std::string>& buffer_names() const;
  /// The model's value of an initializer (parameter or buffer): what the caller's buffers
  /// start from when it does not bring its own (the C++ OnnxModule copies them).
  Tensor initializer(const std::string& name) const;

  /// Nodes on a differentiable path from a parameter or float input to an output without a
  /// gradient rule; checked when the session is built, so a caller can refuse before training.
  const std::vector<autodiff::MissingGradient>& missing_gradients() const;

  /// Runs the model. `inputs` in inputs() order, `params` in parameter_names() order,
  /// `buffers` in buffer_names() order (an empty vector: the model's own values). Checked
  /// like Session::run (count, dtype, rank, fixed dims): onyx::Error naming what was expected
  /// and found. need_grad with missing gradients is an onyx::Error naming the nodes.
  ForwardResult forward(const std::vector<Tensor>& inputs, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& buffers, const ForwardOptions& options = {}) const;

  /// Gradients of the forward call that made `saved`, given one incoming gradient per output
  /// (an empty Tensor means zeros, as for an output the loss does not use).
  Gradients backward(const Saved& saved, const std::vector<Tensor>& output_grads) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
