#include "optimizers/grad_accumulate.h"

#include "kernels/optimizer_kernels.h"

namespace onyx::optim {

void accumulate_grads(Tensor& acc, const Tensor& g, int threads) {
  optimizer_kernels::accumulate(acc, g, threads);
}

void scale_grads(Tensor& g, double scale, int threads) {
  optimizer_kernels::scale(g, static_cast<float>(scale), threads);
}

}  // namespace onyx::optim
