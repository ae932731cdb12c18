// ai.onyx BatchNormTrainingGrad: the input gradient of a training-mode BatchNormalization and
// the two per-channel sums its parameter gradients are made of, in two passes over X and dY
// and one over dX. The gradient rule (autodiff/rules_norm.cpp) writes the same math as a dozen
// plain ONNX nodes, each a pass over the activation; the optimizer's fuse_batch_norm_grad
// (inference/fusions_norm_grad.cpp) swaps them for this kernel.
//
//   inputs:  dY [N, C, ...], X [N, C, ...], scale [C]        (one float dtype)
//   outputs: dX [N, C, ...], sum_dY [1, C, 1], sum_dY_xhat [1, C, 1]
//   xhat = (X - mean) / sqrt(var + epsilon), batch statistics over N and the spatial axes;
//   dX = scale / sqrt(var + epsilon) * (dY - sum_dY / M - xhat * sum_dY_xhat / M), M = N * S.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/prefetch.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

// Independent double accumulators, so the sums vectorise (one running sum is a chain of
// dependent adds, 4x slower) while keeping double's precision over large batches.
constexpr int kLanes = 8;

class BatchNormTrainingGradKernel final : public Kernel {
 public:
  explicit BatchNormTrainingGradKernel(const KernelInfo& info)
      : eps_(info.node.attr_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dY = ctx.required_input(0);
    const Tensor& X = ctx.required_input(1);
    const Tensor& scale = ctx.required_input(2);
    ONYX_CHECK(X.rank() >= 2 && dY.shape() == X.shape() && dY.dtype() == X.dtype(),
               "[{}] dY and X must have one shape and dtype of rank >= 2, got {} {} and {} {}",
               ctx.label(), dtype_name(dY.dtype()), shape_str(dY.shape()),
               dtype_name(X.dtype()), shape_str(X.shape()));
    const int64_t N = X.dim(0), C = X.dim(1), S = X.numel() / std::max<int64_t>(N * C, 1);
    ONYX_CHECK(scale.dtype() == X.dtype() && scale.numel() == C,
               "[{}] scale must be {} with {} values (X's channels), got {} {}", ctx.label(),
               dtype_name(X.dtype()), C, dtype_name(scale.dtype()), shape_str(scale.shape()));
    Tensor& dX = ctx.allocate_output(0, X.dtype(), X.shape());
    Tensor& sum_dy = ctx.allocate_output(1, X.dtype(), {1, C, 1});
    Tensor& sum_dy_xhat = ctx.allocate_output(2, X.dtype(), {1, C, 1});
    if (N * S == 0) {
      dispatch<TypeList<float, double>>(X.dtype(), ctx.label(), [&]<typename T>() {
        std::fill(sum_dy.data<T>(), sum_dy.data<T>() + C, T(0));
        std::fill(sum_dy_xhat.data<T>(), sum_dy_xhat.data<T>() + C, T(0));
      });
      return;
    }
    dispatch<TypeList<float, double>>(X.dtype(), ctx.label(), [&]<typename T>() {
      const T *x = X.data<T>(), *dy = dY.data<T>(), *g = scale.data<T>();
      T *dx = dX.data<T>(), *sd_out = sum_dy.data<T>(), *sdx_out = sum_dy_xhat.data<T>();
      const double M = static_cast<double>(N * S);
      parallel_for(C, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          // Pass 1: the mean.
          double acc[kLanes] = {};
          for (int64_t n = 0; n < N; ++n) {
            const T* xr = x + (n * C + c) * S;
            // The next image's plane (C * S further on) asked for now: each plane is a new
            // stream of a few KB that the hardware prefetchers start on late (prefetch.h). dY's planes are asked for in pass 2; pass 3 reads both
            // from cache.
            if (n + 1 < N) prefetch_lines(xr + C * S, S);
            int64_t i = 0;
            for (; i + kLanes <= S; i += kLanes)
              for (int l = 0; l < kLanes; ++l) acc[l] += static_cast<double>(xr[i + l]);
            for (; i < S; ++i) acc[0] += static_cast<double>(xr[i]);
          }
          double mean = 0;
          for (double a : acc) mean += a;
          mean /= M;
          // Pass 2: sum (x - mean)^2, sum dy, sum dy * (x - mean).
          double v[kLanes] = {}, sd[kLanes] = {}, sdx[kLanes] = {};
          for (int64_t n = 0; n < N; ++n) {
            const T* xr = x + (n * C + c) * S;
            const T* dr = dy + (n * C + c) * S;
            if (n + 1 < N) prefetch_lines(dr + C * S, S);
            int64_t i = 0;
            for (; i + kLanes <= S; i += kLanes)
              for (int l = 0; l < kLanes; ++l) {
                const double xc = static_cast<double>(xr[i + l]) - mean,
                             d = static_cast<double>(dr[i + l]);
                v[l] += xc * xc;
                sd[l] += d;
                sdx[l] += d * xc;
              }
            for (; i < S; ++i) {
              const double xc = static_cast<double>(xr[i]) - mean, d = static_cast<double>(dr[i]);
              v[0] += xc * xc;
              sd[0] += d;
              sdx[0] += d * xc;
            }
          }
          double var = 0, s_dy = 0, s_dyxc = 0;
          for (int l = 0; l < kLanes; ++l) var += v[l], s_dy += sd[l], s_dyxc += sdx[l];
          var /= M;
          const double inv = 1.0 / std::sqrt(var + static_cast<double>(eps_));
          const double s_dyxh = s_dyxc * inv;
          sd_out[c] = static_cast<T>(s_dy);
          sdx_out[c] = static_cast<T>(s_dyxh);
          // Pass 3: dx = a * dy + k * (x - mean) + b, the formula above with its per-channel
          // factors gathered (x is centred first: k * x - k * mean would cancel).
          const double a = static_cast<double>(g[c]) * inv;
          const double k = -a * inv * s_dyxh / M;
          const T ta = static_cast<T>(a), tk = static_cast<T>(k),
                  tb = static_cast<T>(-a * s_dy / M), tm = static_cast<T>(mean);
          for (int64_t n = 0; n < N; ++n) {
            const int64_t o = (n * C + c) * S;
            const T *xr = x + o, *dr = dy + o;
            T* out = dx + o;
            for (int64_t i = 0; i < S; ++i) out[i] = ta * dr[i] + tk * (xr[i] - tm) + tb;
          }
        }
      });
    });
  }

 private:
  float eps_;
};

}  // namespace

void register_batch_norm_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "BatchNormTrainingGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<BatchNormTrainingGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
