// SGD as torch.optim.SGD with dampening 0: g' = g + wd * p; buf = momentum * buf + g';
// p -= lr * buf (or lr * (g' + momentum * buf) with Nesterov). buf starts at zero, so the
// first step's buf is g', as in PyTorch.
#include <vector>

#include "kernels/optimizer_kernels.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

class Sgd final : public FusedOptimizer {
 public:
  Sgd(const OptimizerConfig& config, std::vector<ParamSegment> segments)
      : FusedOptimizer(config, std::move(segments),
                       config.momentum > 0 ? std::vector<std::string>{"momentum"}
                                           : std::vector<std::string>{}) {}

 protected:
  void update(Tensor& p, const Tensor& g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    // Per segment: its rate (parameter groups scale it) and its weight decay.
    std::vector<optimizer_kernels::SgdCoeffs> coeffs(segments_.size());
    for (size_t i = 0; i < segments_.size(); ++i)
      coeffs[i] = {static_cast<float>(lr * segments_[i].lr_scale),
                   static_cast<float>(segment_weight_decay(segments_[i], c.weight_decay)),
                   static_cast<float>(c.momentum), c.nesterov};
    optimizer_kernels::sgd(plan_.view(), coeffs, p, g, c.momentum > 0 ? &buffer(0) : nullptr,
                           threads, low_copy());
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config,
                                    std::vector<ParamSegment> segments) {
  return std::make_unique<Sgd>(config, std::move(segments));
}

}  // namespace onyx::optim
