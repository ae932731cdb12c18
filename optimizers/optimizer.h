// Fused optimizers over flat float32 parameter and gradient buffers: SGD (momentum, Nesterov,
// weight decay), Adam, AdamW and LAMB, with PyTorch's semantics (LAMB as in the LAMB paper and
// ONNX Runtime). One step is one parallel, vectorised pass over all parameters (LAMB: a pass
// for the moments and per-parameter norms, then the update), run by the optimizer kernels of
// the device the buffers live on (kernels/optimizer_kernels.h; the CPU's share their
// per-element math with the ai.onnx.preview.training op kernels).
//
//   auto opt = make_optimizer({.name = "adamw", .weight_decay = 0.01}, buffer.segments());
//   Tensor p = params.tensor(), g = grads.tensor();
//   opt->step(p, g, schedule.lr_at(opt->steps_taken(), 1e-3), threads);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/tensor.h"

namespace onyx::optim {

/// One parameter's slice of the flat buffers.
struct ParamSegment {
  std::string name;
  int64_t offset = 0;
  int64_t size = 0;
  bool decay = true;  // false: excluded from weight decay (biases, norm scales)
  /// Parameter groups: this segment's rate is the scheduled rate times lr_scale, and its
  /// weight decay this value instead of OptimizerConfig::weight_decay when set.
  double lr_scale = 1.0;
  std::optional<double> weight_decay;
  /// Mixed precision: whether the step writes this segment into the low-precision copy
  /// (Optimizer::set_low_precision_copy); false for weights no 16-bit op reads (embeddings
  /// gathered in float32).
  bool low_precision_copy = true;
};

/// The weight decay `seg` gets under `c` (0 when it is excluded from decay).
inline double segment_weight_decay(const ParamSegment& seg, double config_decay) {
  return seg.decay ? seg.weight_decay.value_or(config_decay) : 0.0;
}

struct OptimizerConfig {
  std::string name = "adamw";  // "sgd", "adam", "adamw", "lamb" (case-insensitive)
  double lr = 1e-3;            // base rate; step() takes the scheduled rate
  double momentum = 0.0;       // sgd
  bool nesterov = false;       // sgd (needs momentum > 0)
  double weight_decay = 0.0;   // sgd/adam: L2 added to the gradient; adamw/lamb: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adam, adamw, lamb
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of params from grads with learning rate lr, in place on params. Both are
  /// float32 tensors on one device covering [0, max(offset + size)) of the segments; elements
  /// outside every segment (alignment padding) are left alone. The state buffers live where
  /// params do (moved there on the first step). threads = OpenMP threads (CPU). Results do not
  /// depend on threads. onyx::Error for a rate that is negative or not finite, buffers of
  /// another dtype or too short, or a device this build has no optimizer kernels for.
  virtual void step(Tensor& params, const Tensor& grads, double lr, int threads) = 0;
  /// Optimizer state for checkpoints, as named tensors (host copies): "step" (int64 scalar) and
  /// float32 buffers over the parameter span ("momentum" for sgd with momentum; "m", "v").
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  /// Restores state(); onyx::Error naming the entry when a name is missing or unknown, or a
  /// dtype or size differs. Updates continue bit-identically after a round trip.
  virtual void load_state(const std::vector<std::pair<std::string, Tensor>>& state) = 0;
  virtual int64_t steps_taken() const = 0;
  const OptimizerConfig& config() const { return config_; }
  /// Mixed precision: from the next step on, each step also writes the updated parameters,
  /// rounded to `copy`'s type (bfloat16 or float16, the flat layout of params, on their device),
  /// into `copy` as it goes (optimizer_kernels' params_low). An undefined tensor stops it. The
  /// caller keeps the memory alive.
  void set_low_precision_copy(Tensor copy) { low_copy_ = std::move(copy); }

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  /// The copy set_low_precision_copy() asked for, or nullptr.
  Tensor* low_copy() { return low_copy_.defined() ? &low_copy_ : nullptr; }
  OptimizerConfig config_;

 private:
  Tensor low_copy_;
};

/// low = params rounded to low's type (bfloat16 or float16; same element count, one device), in
/// parallel: the copy Optimizer::set_low_precision_copy's updates maintain, made whole (before the
/// first step, after a checkpoint load or a parameter write).
void copy_to_low_precision(const Tensor& params, Tensor& low, int threads);

/// Validates `config` and `segments` (onyx::Error "[optimizer] ..." naming the bad field:
/// unknown name, negative rates, betas outside [0, 1), nesterov without momentum, segments
/// that overlap or have negative offset or size) and builds the optimizer.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<ParamSegment> segments);

}  // namespace onyx::optim
