#include "optimizers/lr_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>

#include "graph/error.h"

namespace onyx::optim {

double LrSchedule::lr_at(int64_t step, double base) const {
  std::string k = kind;
  std::transform(k.begin(), k.end(), k.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const bool decays = k == "linear" || k == "cosine";
  ONYX_CHECK(decays || k == "constant" || k == "step",
             "[lr_schedule] unknown kind '{}' (expected constant, linear, cosine or step)", kind);
  ONYX_CHECK(step >= 0, "[lr_schedule] step should be >= 0 but is {}", step);
  ONYX_CHECK(std::isfinite(base) && base >= 0,
             "[lr_schedule] base rate should be finite and >= 0 but is {}", base);
  ONYX_CHECK(warmup_steps >= 0, "[lr_schedule] warmup_steps should be >= 0 but is {}",
             warmup_steps);
  if (decays) {
    ONYX_CHECK(total_steps > warmup_steps,
               "[lr_schedule] {}: total_steps should be > warmup_steps ({}) but is {}", k,
               warmup_steps, total_steps);
    ONYX_CHECK(min_lr >= 0 && min_lr <= base,
               "[lr_schedule] {}: min_lr should be in [0, base rate {}] but is {}", k, base,
               min_lr);
  }
  if (k == "step") {
    ONYX_CHECK(step_size > 0, "[lr_schedule] step: step_size should be > 0 but is {}", step_size);
    ONYX_CHECK(gamma > 0, "[lr_schedule] step: gamma should be > 0 but is {}", gamma);
  }

  if (step < warmup_steps)
    return base * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t after = step - warmup_steps;
  if (k == "constant") return base;
  if (k == "step") return base * std::pow(gamma, static_cast<double>(after / step_size));
  const double progress =
      std::min(1.0, static_cast<double>(after) / static_cast<double>(total_steps - warmup_steps));
  const double shape =
      k == "linear" ? 1.0 - progress : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return min_lr + (base - min_lr) * shape;
}

}  // namespace onyx::optim
