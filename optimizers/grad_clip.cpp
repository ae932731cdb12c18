#include "optimizers/grad_clip.h"

#include <cmath>

#include "kernels/optimizer_kernels.h"

namespace onyx::optim {

double global_norm(const Tensor& g, int threads) {
  return std::sqrt(optimizer_kernels::sum_squares(g, threads));
}

double clip_by_global_norm(Tensor& g, double max_norm, int threads) {
  const double norm = global_norm(g, threads);
  clip_to_norm(g, norm, max_norm, threads);
  return norm;
}

void clip_to_norm(Tensor& g, double norm, double max_norm, int threads) {
  if (max_norm <= 0 || !std::isfinite(norm)) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) optimizer_kernels::scale(g, static_cast<float>(coef), threads);
}

double copy_sum_squares(Tensor& dst, const Tensor& src, int threads) {
  if (dst.raw() == src.raw() && dst.nbytes() == src.nbytes() && dst.device() == src.device())
    return optimizer_kernels::sum_squares(src, threads);
  return optimizer_kernels::copy_sum_squares(dst, src, threads);
}

bool has_non_finite(const Tensor& g, int threads) {
  return !optimizer_kernels::all_finite(g, threads);
}

}  // namespace onyx::optim
