// Dynamic loss scaling for float16 training, with exactly the rules and defaults of PyTorch's
// torch.amp.GradScaler: the loss gradient starts at `init_scale`; a step whose gradients hold
// an inf or NaN is skipped and the scale multiplied by `backoff_factor`; after
// `growth_interval` clean steps in a row the scale is multiplied by `growth_factor` (kept
// only if finite). The scale is a float32, as torch keeps it. bfloat16 has float32's
// exponent range and trains without a scaler.
#pragma once

#include <cstdint>

#include "graph/tensor.h"

namespace onyx::optim {

struct LossScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  /// onyx::Error for a config torch would refuse (scale <= 0, growth <= 1, backoff outside
  /// (0, 1), interval < 1).
  explicit LossScaler(const LossScalerConfig& config = {});

  /// The factor the loss gradient is multiplied by this step.
  float scale() const { return scale_; }
  /// Clean steps in a row since the last growth or backoff.
  int64_t growth_tracker() const { return tracker_; }
  const LossScalerConfig& config() const { return cfg_; }

  /// Multiplies the float32 gradients by `extra` / scale() in one pass (float32 arithmetic, the
  /// reciprocal taken in double as torch does) and returns true when any of them was NaN or
  /// infinite before: the step must then be skipped. `extra` folds in averaging (over
  /// micro-batches and ranks) so the gradients are read once.
  bool unscale(Tensor& grads, double extra, int threads) const;
  /// torch._amp_update_scale_: after a step, with whether its gradients were non-finite.
  void update(bool found_inf);

  /// Restores a saved state; onyx::Error for a scale that is not positive and finite or a
  /// negative tracker.
  void set_state(float scale, int64_t growth_tracker);

 private:
  LossScalerConfig cfg_;
  float scale_ = 65536.0f;
  int64_t tracker_ = 0;
};

}  // namespace onyx::optim
