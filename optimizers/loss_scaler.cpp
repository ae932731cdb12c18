#include "optimizers/loss_scaler.h"

#include <cmath>

#include "graph/error.h"
#include "kernels/optimizer_kernels.h"

namespace onyx::optim {

LossScaler::LossScaler(const LossScalerConfig& config) : cfg_(config) {
  ONYX_CHECK(std::isfinite(cfg_.init_scale) && cfg_.init_scale > 0,
             "[loss scaler] init_scale should be a positive finite number but is {}", cfg_.init_scale);
  ONYX_CHECK(cfg_.growth_factor > 1.0, "[loss scaler] growth_factor should be > 1 but is {}",
             cfg_.growth_factor);
  ONYX_CHECK(cfg_.backoff_factor > 0.0 && cfg_.backoff_factor < 1.0,
             "[loss scaler] backoff_factor should be in (0, 1) but is {}", cfg_.backoff_factor);
  ONYX_CHECK(cfg_.growth_interval >= 1, "[loss scaler] growth_interval should be >= 1 but is {}",
             cfg_.growth_interval);
  scale_ = static_cast<float>(cfg_.init_scale);
  ONYX_CHECK(std::isfinite(scale_) && scale_ > 0, "[loss scaler] init_scale {} does not fit a float32",
             cfg_.init_scale);
}

bool LossScaler::unscale(Tensor& grads, double extra, int threads) const {
  // GradScaler: inv_scale = scale.double().reciprocal().float(); ours folds `extra` in.
  const float mult = static_cast<float>(extra / static_cast<double>(scale_));
  return optimizer_kernels::unscale(grads, mult, threads);
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * cfg_.backoff_factor);
    tracker_ = 0;
    return;
  }
  int64_t successful = tracker_ + 1;
  if (successful == cfg_.growth_interval) {
    float grown = static_cast<float>(static_cast<double>(scale_) * cfg_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    tracker_ = 0;
  } else {
    tracker_ = successful;
  }
}

void LossScaler::set_state(float scale, int64_t growth_tracker) {
  ONYX_CHECK(std::isfinite(scale) && scale > 0 && growth_tracker >= 0,
             "[loss scaler] a saved state needs a positive finite scale and a tracker >= 0, got "
             "scale {} and tracker {}", scale, growth_tracker);
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace onyx::optim
