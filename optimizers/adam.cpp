// Adam and AdamW as torch.optim.Adam / AdamW (amsgrad off), at step t (1-based):
//   Adam:  g' = g + wd * p                        AdamW: p *= 1 - lr * wd, g' = g
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <cmath>

#include "kernels/cpu/optimizer_math.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

class Adam final : public FusedOptimizer {
 public:
  Adam(const OptimizerConfig& config, std::vector<ParamSegment> segments, bool decoupled)
      : FusedOptimizer(config, std::move(segments), {"m", "v"}), decoupled_(decoupled) {}

 protected:
  void update(float* p, const float* g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    const double t = static_cast<double>(steps_taken());
    const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
    cpu::AdamCoeffs<float> with_decay{};
    with_decay.beta1 = static_cast<float>(c.beta1);
    with_decay.beta2 = static_cast<float>(c.beta2);
    with_decay.eps = static_cast<float>(c.eps);
    with_decay.step = static_cast<float>(lr / bc1);
    with_decay.denom_scale = static_cast<float>(1.0 / std::sqrt(bc2));
    with_decay.post = 1.0f;
    cpu::AdamCoeffs<float> no_decay = with_decay;
    no_decay.l2 = 0.0f;
    no_decay.pre = 1.0f;
    with_decay.l2 = decoupled_ ? 0.0f : static_cast<float>(c.weight_decay);
    with_decay.pre = decoupled_ ? static_cast<float>(1.0 - lr * c.weight_decay) : 1.0f;
    float *m = buffer(0), *v = buffer(1);
    plan_.for_each_piece(threads, [&](const Piece& pc, int64_t) {
      const int64_t b = pc.begin;
      cpu::adam_update<float>(p + b, g + b, m + b, v + b, p + b, m + b, v + b, pc.end - b,
                              segments_[pc.segment].decay ? with_decay : no_decay);
    });
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
