// Learning-rate schedules: an optional linear warm-up, then constant, linear decay, cosine
// decay or step decay.
//
//   LrSchedule s{.kind = "cosine", .warmup_steps = 100, .total_steps = 10000, .min_lr = 1e-5};
//   double lr = s.lr_at(step, 3e-4);
#pragma once

#include <cstdint>
#include <string>

namespace onyx::optim {

struct LrSchedule {
  /// "constant", "linear" (warm-up then linear decay to min_lr at total_steps), "cosine"
  /// (warm-up then cosine decay to min_lr at total_steps), "step" (after warm-up, lr *= gamma
  /// every step_size steps). Case-insensitive.
  std::string kind = "constant";
  int64_t warmup_steps = 0, total_steps = 0, step_size = 1;
  double gamma = 0.1, min_lr = 0.0;

  /// Learning rate for optimizer step `step` (0-based) with base rate `base`.
  /// Warm-up (step < warmup_steps): base * (step + 1) / warmup_steps, so no step has rate 0 and
  /// the last warm-up step reaches base. linear/cosine then decay over
  /// [warmup_steps, total_steps] and stay at min_lr after; step: base * gamma^floor((step -
  /// warmup_steps) / step_size). onyx::Error "[lr_schedule] ..." on an unknown kind, step < 0,
  /// base < 0, warmup_steps < 0, total_steps <= warmup_steps (linear/cosine), min_lr outside
  /// [0, base] (linear/cosine), step_size <= 0 or gamma <= 0 (step).
  double lr_at(int64_t step, double base) const;
};

}  // namespace onyx::optim
