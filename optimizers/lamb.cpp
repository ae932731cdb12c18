// LAMB (You et al. 2019, as ONNX Runtime's LambOptimizer), at step t (1-based):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p      (wd: decoupled)
//   p -= lr * (||p|| / ||r||) * r, norms per parameter segment; ratio 1 when either norm is 0.
// Two passes: moments plus per-segment squared norms, then the update (r recomputed from m, v).
#include <cmath>
#include <vector>

#include "kernels/optimizer_kernels.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

class Lamb final : public FusedOptimizer {
 public:
  Lamb(const OptimizerConfig& config, std::vector<ParamSegment> segments)
      : FusedOptimizer(config, std::move(segments), {"m", "v"}),
        p_sq_(segments_.size()),
        r_sq_(segments_.size()),
        scale_(segments_.size()) {}

 protected:
  void update(Tensor& p, const Tensor& g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    const double t = static_cast<double>(steps_taken());
    std::vector<optimizer_kernels::LambCoeffs> per_segment(segments_.size());
    for (size_t i = 0; i < segments_.size(); ++i) {
      optimizer_kernels::LambCoeffs& k = per_segment[i];
      k.beta1 = static_cast<float>(c.beta1);
      k.beta2 = static_cast<float>(c.beta2);
      k.eps = static_cast<float>(c.eps);
      k.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(c.beta1, t)));
      k.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(c.beta2, t)));
      k.wd = static_cast<float>(segment_weight_decay(segments_[i], c.weight_decay));
    }
    const optimizer_kernels::PiecePlan plan = plan_.view();
    // Squared norms per segment, reduced in piece order (fixed by the plan): thread-independent.
    optimizer_kernels::lamb_moments(plan, per_segment, p, g, buffer(0), buffer(1), p_sq_, r_sq_,
                                    threads);
    for (size_t s = 0; s < segments_.size(); ++s) {
      const double pn = std::sqrt(p_sq_[s]), rn = std::sqrt(r_sq_[s]);
      scale_[s] = static_cast<float>(lr * segments_[s].lr_scale * (pn > 0 && rn > 0 ? pn / rn : 1.0));
    }
    optimizer_kernels::lamb_apply(plan, per_segment, scale_, p, buffer(0), buffer(1), threads,
                                  low_copy());
  }

 private:
  std::vector<double> p_sq_, r_sq_;  // per segment: ||p||^2, ||r||^2
  std::vector<float> scale_;         // per segment: lr * trust ratio
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config,
                                     std::vector<ParamSegment> segments) {
  return std::make_unique<Lamb>(config, std::move(segments));
}

}  // namespace onyx::optim
