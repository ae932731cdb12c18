// LAMB (You et al. 2019, as ONNX Runtime's LambOptimizer), at step t (1-based):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   r = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p      (wd: decoupled)
//   p -= lr * (||p|| / ||r||) * r, norms per parameter segment; ratio 1 when either norm is 0.
// Two passes: moments plus per-piece squared norms, then the update (r recomputed from m, v).
#include <cmath>
#include <vector>

#include "kernels/cpu/optimizer_math.h"
#include "optimizers/fused_optimizer.h"

namespace onyx::optim {
namespace {

class Lamb final : public FusedOptimizer {
 public:
  Lamb(const OptimizerConfig& config, std::vector<ParamSegment> segments)
      : FusedOptimizer(config, std::move(segments), {"m", "v"}),
        piece_sq_(2 * plan_.pieces().size()),
        scale_(segments_.size()) {}

 protected:
  void update(float* p, const float* g, double lr, int threads) override {
    const OptimizerConfig& c = config_;
    const double t = static_cast<double>(steps_taken());
    std::vector<cpu::LambCoeffs<float>> per_segment(segments_.size());
    for (size_t i = 0; i < segments_.size(); ++i) {
      cpu::LambCoeffs<float>& k = per_segment[i];
      k.beta1 = static_cast<float>(c.beta1);
      k.beta2 = static_cast<float>(c.beta2);
      k.eps = static_cast<float>(c.eps);
      k.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(c.beta1, t)));
      k.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(c.beta2, t)));
      k.wd = static_cast<float>(segment_weight_decay(segments_[i], c.weight_decay));
    }
    auto coeffs = [&](const Piece& pc) -> const cpu::LambCoeffs<float>& {
      return per_segment[pc.segment];
    };
    float *m = buffer(0), *v = buffer(1);

    plan_.for_each_piece(threads, [&](const Piece& pc, int64_t i) {
      const int64_t b = pc.begin;
      double& p_sq = piece_sq_[2 * i];
      double& r_sq = piece_sq_[2 * i + 1];
      p_sq = r_sq = 0;
      cpu::lamb_moments<float>(p + b, g + b, m + b, v + b, pc.end - b, coeffs(pc), p_sq, r_sq);
    });
    // Reduce in piece order (fixed by the plan), so the result does not depend on threads.
    std::vector<double> p_sq(segments_.size(), 0.0), r_sq(segments_.size(), 0.0);
    const auto& pieces = plan_.pieces();
    for (size_t i = 0; i < pieces.size(); ++i) {
      p_sq[pieces[i].segment] += piece_sq_[2 * i];
      r_sq[pieces[i].segment] += piece_sq_[2 * i + 1];
    }
    for (size_t s = 0; s < segments_.size(); ++s) {
      const double pn = std::sqrt(p_sq[s]), rn = std::sqrt(r_sq[s]);
      scale_[s] = static_cast<float>(lr * segments_[s].lr_scale * (pn > 0 && rn > 0 ? pn / rn : 1.0));
    }
    plan_.for_each_piece(threads, [&](const Piece& pc, int64_t) {
      const int64_t b = pc.begin;
      cpu::lamb_apply<float>(p + b, m + b, v + b, pc.end - b, coeffs(pc), scale_[pc.segment]);
    });
  }

 private:
  std::vector<double> piece_sq_;  // per piece: ||p||^2, ||r||^2 partial sums
  std::vector<float> scale_;      // per segment: lr * trust ratio
};

}  // namespace

std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config,
                                     std::vector<ParamSegment> segments) {
  return std::make_unique<Lamb>(config, std::move(segments));
}

}  // namespace onyx::optim
