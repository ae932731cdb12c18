// Adam and AdamW as torch.optim.Adam / AdamW (amsgrad off), at step t (1-based):
//   Adam:  g' = g + wd * p                        AdamW: p *= 1 - lr * wd, g' = g
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <cmath>
#include <vector>

#include "kernels/optimizer_kernels.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

class Adam final : public FusedOptimizer {
 public:
  Adam(const OptimizerConfig& config, std::vector<ParamSegment> segments, bool decoupled)
      : FusedOptimizer(config, std::move(segments), {"m", "v"}), decoupled_(decoupled) {}

 protected:
  void update(Tensor& p, const Tensor& g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    const double t = static_cast<double>(steps_taken());
    const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
    // Per segment: its rate (parameter groups scale it) and its weight decay.
    std::vector<optimizer_kernels::AdamCoeffs> coeffs(segments_.size());
    for (size_t i = 0; i < segments_.size(); ++i) {
      const double seg_lr = lr * segments_[i].lr_scale;
      const double wd = segment_weight_decay(segments_[i], c.weight_decay);
      optimizer_kernels::AdamCoeffs& k = coeffs[i];
      k.beta1 = static_cast<float>(c.beta1);
      k.beta2 = static_cast<float>(c.beta2);
      k.eps = static_cast<float>(c.eps);
      k.step = static_cast<float>(seg_lr / bc1);
      k.denom_scale = static_cast<float>(1.0 / std::sqrt(bc2));
      k.post = 1.0f;
      k.l2 = decoupled_ ? 0.0f : static_cast<float>(wd);
      k.pre = decoupled_ ? static_cast<float>(1.0 - seg_lr * wd) : 1.0f;
    }
    optimizer_kernels::adam(plan_.view(), coeffs, p, g, buffer(0), buffer(1), threads,
                            low_copy());
  }

 private:
  bool decoupled_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config,
                                     std::vector<ParamSegment> segments, bool decoupled) {
  return std::make_unique<Adam>(config, std::move(segments), decoupled);
}

}  // namespace onyx::optim
