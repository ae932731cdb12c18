#include "optimizers/grad_accumulate.h"

#include "graph/error.h"
#include "kernels/cpu/optimizer_math.h"
#include "kernels/parallel.h"

namespace onyx::optim {
namespace {
constexpr int64_t kGrain = 32768;
}  // namespace

void accumulate_grads(float* acc, const float* g, int64_t n, int threads) {
  ONYX_CHECK(n >= 0 && (n == 0 || (acc && g)),
             "[optimizer] accumulate_grads: expected two buffers of n >= 0 floats but n is {}", n);
  parallel_for(n, threads, kGrain,
               [&](int64_t b, int64_t e) { cpu::accumulate(acc + b, g + b, e - b); });
}

void scale_grads(float* g, int64_t n, double scale, int threads) {
  ONYX_CHECK(n >= 0 && (n == 0 || g),
             "[optimizer] scale_grads: expected a buffer of n >= 0 floats but n is {}", n);
  const float s = static_cast<float>(scale);
  parallel_for(n, threads, kGrain,
               [&](int64_t b, int64_t e) { cpu::scale_in_place(g + b, e - b, s); });
}

}  // namespace onyx::optim
