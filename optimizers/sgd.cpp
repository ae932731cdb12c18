// SGD as torch.optim.SGD with dampening 0: g' = g + wd * p; buf = momentum * buf + g';
// p -= lr * buf (or lr * (g' + momentum * buf) with Nesterov). buf starts at zero, so the
// first step's buf is g', as in PyTorch.
#include <vector>

#include "kernels/cpu/optimizer_math.h"
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
  void update(float* p, const float* g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    // Per segment: its rate (parameter groups scale it) and its weight decay.
    std::vector<cpu::MomentumCoeffs<float>> coeffs(segments_.size());
    for (size_t i = 0; i < segments_.size(); ++i)
      coeffs[i] = {static_cast<float>(lr * segments_[i].lr_scale),
                   static_cast<float>(segment_weight_decay(segments_[i], c.weight_decay)),
                   static_cast<float>(c.momentum), 1.0f, c.nesterov};
    if (c.momentum <= 0) {
      plan_.for_each_piece(threads, [&](const Piece& pc, int64_t) {
        const int64_t b = pc.begin;
        const auto& k = coeffs[pc.segment];
        cpu::sgd_update<float>(p + b, g + b, p + b, pc.end - b, k.lr, k.l2);
      });
      return;
    }
    float* buf = buffer(0);
    plan_.for_each_piece(threads, [&](const Piece& pc, int64_t) {
      const int64_t b = pc.begin;
      cpu::momentum_update<float>(p + b, g + b, buf + b, p + b, buf + b, pc.end - b,
                                  coeffs[pc.segment]);
    });
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config,
                                    std::vector<ParamSegment> segments) {
  return std::make_unique<Sgd>(config, std::move(segments));
}

}  // namespace onyx::optim
