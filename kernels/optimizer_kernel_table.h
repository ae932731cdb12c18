// The per-device implementations behind kernels/optimizer_kernels.h (internal to kernels/). A
// provider with optimizer kernels fills one Table in its registration function, which
// kernels/optimizer_kernels.cpp calls once per process (an explicit call, like the kernel
// registries: static initialisers are dropped from static libraries). A CUDA implementation is
// kernels/cuda/optimizer_kernels.* plus one call there; optimizers/ does not change.
//
// The functions get their arguments checked: float32 tensors, all on the device the table is
// for, sizes covering plan.span (or equal element counts), coefficient arrays of plan.segments.
#pragma once

#include "kernels/optimizer_kernels.h"

namespace onyx::optimizer_kernels {

struct Table {
  void (*sgd)(const PiecePlan&, std::span<const SgdCoeffs>, Tensor& params, const Tensor& grads,
              Tensor* momentum, int threads, Tensor* params_low) = nullptr;
  void (*adam)(const PiecePlan&, std::span<const AdamCoeffs>, Tensor& params, const Tensor& grads,
               Tensor& m, Tensor& v, int threads, Tensor* params_low) = nullptr;
  void (*lamb_moments)(const PiecePlan&, std::span<const LambCoeffs>, const Tensor& params,
                       const Tensor& grads, Tensor& m, Tensor& v, std::span<double> param_sq,
                       std::span<double> dir_sq, int threads) = nullptr;
  void (*lamb_apply)(const PiecePlan&, std::span<const LambCoeffs>, std::span<const float> scale,
                     Tensor& params, const Tensor& m, const Tensor& v, int threads,
                     Tensor* params_low) = nullptr;
  double (*sum_squares)(const Tensor& g, int threads) = nullptr;
  double (*copy_sum_squares)(Tensor& dst, const Tensor& src, int threads) = nullptr;
  bool (*all_finite)(const Tensor& g, int threads) = nullptr;
  void (*scale)(Tensor& g, float s, int threads) = nullptr;
  bool (*unscale)(Tensor& g, float s, int threads) = nullptr;
  void (*accumulate)(Tensor& acc, const Tensor& g, int threads) = nullptr;
  void (*to_low_precision)(const Tensor& params, Tensor& low, int threads) = nullptr;
};

}  // namespace onyx::optimizer_kernels

namespace onyx::cpu {
/// Fills `t` with the CPU implementations (kernels/cpu/optimizer_kernels.cpp).
void register_optimizer_kernels(optimizer_kernels::Table& t);
}  // namespace onyx::cpu
