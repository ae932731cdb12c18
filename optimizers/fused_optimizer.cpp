#include "optimizers/fused_optimizer.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "graph/error.h"
#include "kernels/optimizer_kernels.h"

namespace onyx::optim {

FusedOptimizer::FusedOptimizer(OptimizerConfig config, std::vector<ParamSegment> segments,
                               const std::vector<std::string>& buffers)
    : Optimizer(std::move(config)), segments_(std::move(segments)), plan_(segments_) {
  for (const std::string& name : buffers)
    buffers_.emplace_back(name, Tensor::zeros(DataType::Float, {plan_.span()}));
}

void FusedOptimizer::step(Tensor& params, const Tensor& grads, double lr, int threads) {
  ONYX_CHECK(std::isfinite(lr) && lr >= 0,
             "[optimizer] {} step: learning rate should be finite and >= 0 but is {}", config_.name,
             lr);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&params, &grads})
    ONYX_CHECK((t->dtype() == DataType::Float || !t->defined()) && t->numel() >= plan_.span(),
               "[optimizer] {} step: params and grads should be float32 buffers of at least {} "
               "elements but {} is {} {}",
               config_.name, plan_.span(), t == &params ? "params" : "grads",
               dtype_name(t->dtype()), shape_str(t->shape()));
  ONYX_CHECK(params.device() == grads.device(),
             "[optimizer] {} step: params are on {} but grads on {}", config_.name,
             params.device().str(), grads.device().str());
  const Device device = params.device();
  optimizer_kernels::check_device(device, config_.name + " step");
  // The state lives where the parameters do (moved there once, before the first update).
  for (auto& [name, buf] : buffers_)
    if (buf.device() != device) buf = optimizer_kernels::copy_to(buf, device);
  ++steps_;
  update(params, grads, lr, threads);
}

std::vector<std::pair<std::string, Tensor>> FusedOptimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("step", Tensor::scalar<int64_t>(steps_));
  for (const auto& [name, t] : buffers_)
    out.emplace_back(name, optimizer_kernels::copy_to(t, Device{}));  // host copies
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
  std::vector<Tensor> loaded;  // copied (where the state lives) before any is replaced
  for (const auto& [name, buf] : buffers_)
    loaded.push_back(optimizer_kernels::copy_to(*find(name), buf.device()).reshape({plan_.span()}));
  steps_ = steps;
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].second = std::move(loaded[i]);
}

}  // namespace onyx::optim
