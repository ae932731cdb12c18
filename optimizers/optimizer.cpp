#include "optimizers/optimizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "graph/error.h"
#include "kernels/optimizer_kernels.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

void check_rate(const std::string& field, double v, const std::string& opt) {
  ONYX_CHECK(std::isfinite(v) && v >= 0, "[optimizer] {}: {} should be finite and >= 0 but is {}",
             opt, field, v);
}

void check_beta(const char* field, double v, const std::string& opt) {
  ONYX_CHECK(v >= 0 && v < 1, "[optimizer] {}: {} should be in [0, 1) but is {}", opt, field, v);
}

}  // namespace

void copy_to_low_precision(const Tensor& params, Tensor& low, int threads) {
  optimizer_kernels::to_low_precision(params, low, threads);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<ParamSegment> segments) {
  OptimizerConfig c = config;
  std::transform(c.name.begin(), c.name.end(), c.name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  const bool adam_like = c.name == "adam" || c.name == "adamw" || c.name == "lamb";
  ONYX_CHECK(adam_like || c.name == "sgd",
             "[optimizer] unknown optimizer '{}' (expected sgd, adam, adamw or lamb)", config.name);
  check_rate("lr", c.lr, c.name);
  check_rate("weight_decay", c.weight_decay, c.name);
  if (c.name == "sgd") {
    check_rate("momentum", c.momentum, c.name);
    ONYX_CHECK(!c.nesterov || c.momentum > 0,
               "[optimizer] sgd: nesterov needs momentum > 0 but momentum is {}", c.momentum);
  } else {
    check_beta("beta1", c.beta1, c.name);
    check_beta("beta2", c.beta2, c.name);
    check_rate("eps", c.eps, c.name);
  }
  for (const ParamSegment& seg : segments) {
    check_rate("lr_scale of '" + seg.name + "'", seg.lr_scale, c.name);
    if (seg.weight_decay) check_rate("weight_decay of '" + seg.name + "'", *seg.weight_decay, c.name);
  }
  if (c.name == "sgd") return make_sgd(c, std::move(segments));
  if (c.name == "lamb") return make_lamb(c, std::move(segments));
  return make_adam(c, std::move(segments), c.name == "adamw");
}

}  // namespace onyx::optim
