#include "optimizers/fused_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graph/error.h"

namespace onyx::optim {

FusedOptimizer::FusedOptimizer(OptimizerConfig config, std::vector<ParamSegment> segments,
                               const std::vector<std::string>& buffers)
    : Optimizer(std::move(config)), segments_(std::move(segments)), plan_(segments_) {
  for (const std::string& name : buffers)
    buffers_.emplace_back(name, Tensor::zeros(DataType::Float, {plan_.span()}));
}

void FusedOptimizer::step(float* params, const float* grads, double lr, int threads) {
  ONYX_CHECK(std::isfinite(lr) && lr >= 0,
             "[optimizer] {} step: learning rate should be finite and >= 0 but is {}", config_.name,
             lr);
  ONYX_CHECK(plan_.span() == 0 || (params && grads),
             "[optimizer] {} step: params and grads should be non-null buffers of {} floats",
             config_.name, plan_.span());
  ++steps_;
  update(params, grads, lr, threads);
}

std::vector<std::pair<std::string, Tensor>> FusedOptimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("step", Tensor::scalar<int64_t>(steps_));
  for (const auto& [name, t] : buffers_) out.emplace_back(name, t.clone());
  return out;
}

void FusedOptimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  std::vector<std::string> expected{"step"};
  for (const auto& b : buffers_) expected.push_back(b.first);
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : state)
      if (n == name) return &t;
    return nullptr;
  };
  for (const auto& [n, t] : state)
    ONYX_CHECK(std::find(expected.begin(), expected.end(), n) != expected.end(),
               "[optimizer] {} load_state: unknown entry '{}' (expected {})", config_.name, n,
               fmt::join(expected, ", "));
  // Check everything before changing anything, so a bad state leaves the optimizer intact.
  const Tensor* step = find("step");
  ONYX_CHECK(step, "[optimizer] {} load_state: entry 'step' is missing (expected {})", config_.name,
             fmt::join(expected, ", "));
  ONYX_CHECK(step->dtype() == DataType::Int64 && step->numel() == 1,
             "[optimizer] {} load_state: entry 'step' should be an int64 scalar but is {} {}",
             config_.name, dtype_name(step->dtype()), shape_str(step->shape()));
  const int64_t steps = step->data<int64_t>()[0];
  ONYX_CHECK(steps >= 0, "[optimizer] {} load_state: entry 'step' should be >= 0 but is {}",
             config_.name, steps);
  for (const auto& [name, buf] : buffers_) {
    const Tensor* t = find(name);
    ONYX_CHECK(t, "[optimizer] {} load_state: entry '{}' is missing (expected {})", config_.name,
               name, fmt::join(expected, ", "));
    ONYX_CHECK(t->dtype() == DataType::Float && t->numel() == buf.numel(),
               "[optimizer] {} load_state: entry '{}' should be float [{}] but is {} {}",
               config_.name, name, buf.numel(), dtype_name(t->dtype()), shape_str(t->shape()));
  }
  steps_ = steps;
  for (auto& [name, buf] : buffers_)
    if (buf.nbytes() > 0) std::memcpy(buf.raw(), find(name)->raw(), buf.nbytes());
}

}  // namespace onyx::optim
