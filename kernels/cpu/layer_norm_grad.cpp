// ai.onyx LayerNormalizationGrad: the input gradient of LayerNormalization and the row sums its
// parameter gradients are made of, from the Mean and InvStdDev the forward node saved, in two
// passes over each row (which stays in cache between them). The gradient rule
// (autodiff/rules_norm.cpp) writes the same math as about fifteen plain ONNX nodes, each a pass
// over the activation (3.6 % of a BERT-small training step at 1 thread); the optimizer's
// fuse_layer_norm_grad (inference/fusions_layer_norm_grad.cpp) swaps them for this kernel.
//
//   inputs:  dY, X (one shape), scale (X.shape[axis:]'s element count), Mean, InvStdDev (one
//            value per row)                                    (one float dtype)
//   outputs: dX (X's shape); optional sum_dY_xhat and sum_dY (X.shape[axis:]: sums over rows)
//   rows: X viewed as [outer, inner], inner = prod(X.shape[axis:]); xhat = (X - Mean) * InvStdDev
//   and g = dY * scale per row; dX = InvStdDev * (g - mean(g) - xhat * mean(g * xhat)).
#include <algorithm>

#include "graph/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

// Independent double accumulators, so a row's sums vectorise (one running sum is a chain of
// dependent adds) while keeping double's precision over long rows.
constexpr int kLanes = 8;

class LayerNormalizationGradKernel final : public Kernel {
 public:
  explicit LayerNormalizationGradKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dY = ctx.required_input(0);
    const Tensor& X = ctx.required_input(1);
    const Tensor& scale = ctx.required_input(2);
    const Tensor& mean = ctx.required_input(3);
    const Tensor& inv = ctx.required_input(4);
    const int64_t rank = X.rank();
    ONYX_CHECK(dY.shape() == X.shape() && dY.dtype() == X.dtype(),
               "[{}] dY and X must have one shape and dtype, got {} {} and {} {}", ctx.label(),
               dtype_name(dY.dtype()), shape_str(dY.shape()), dtype_name(X.dtype()),
               shape_str(X.shape()));
    ONYX_CHECK(axis_ >= -rank && axis_ < std::max<int64_t>(rank, 1),
               "[{}] axis must be in [{}, {}) for X {}, got {}", ctx.label(), -rank, rank,
               shape_str(X.shape()), axis_);
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    const Shape inner_shape(X.shape().begin() + axis, X.shape().end());
    const int64_t inner = shape_numel(inner_shape);
    const int64_t outer = inner == 0 ? 0 : X.numel() / inner;
    for (const Tensor* t : {&scale, &mean, &inv})
      ONYX_CHECK(t->dtype() == X.dtype(), "[{}] scale, Mean and InvStdDev must be {} like X, got {}",
                 ctx.label(), dtype_name(X.dtype()), dtype_name(t->dtype()));
    ONYX_CHECK(scale.numel() == inner,
               "[{}] scale must hold the {} values of X.shape[{}:] = {}, got {}", ctx.label(),
               inner, axis, shape_str(inner_shape), shape_str(scale.shape()));
    ONYX_CHECK(mean.numel() == outer && inv.numel() == outer,
               "[{}] Mean and InvStdDev must hold one value per row of X {} ({} rows), got {} and {}",
               ctx.label(), shape_str(X.shape()), outer, shape_str(mean.shape()),
               shape_str(inv.shape()));
    Tensor& dX = ctx.allocate_output(0, X.dtype(), X.shape());
    auto optional_output = [&](int i) {
      return ctx.num_outputs() > i && ctx.output_wanted(i)
                 ? &ctx.allocate_output(i, X.dtype(), inner_shape)
                 : nullptr;
    };
    Tensor* sum_dy_xh = optional_output(1);
    Tensor* sum_dy = optional_output(2);
    dispatch<TypeList<float, double>>(X.dtype(), ctx.label(), [&]<typename T>() {
      run<T>(ctx, dY.data<T>(), X.data<T>(), scale.data<T>(), mean.data<T>(), inv.data<T>(),
             dX.data<T>(), sum_dy_xh ? sum_dy_xh->data<T>() : nullptr,
             sum_dy ? sum_dy->data<T>() : nullptr, outer, inner);
    });
  }

 private:
  template <typename T>
  static void run(KernelContext& ctx, const T* dy, const T* x, const T* s, const T* mean,
                  const T* inv, T* dx, T* sum_dy_xh, T* sum_dy, int64_t outer, int64_t inner) {
    // Row blocks, one per thread, each summing its own column partials (added in block order
    // after, so the sums do not depend on scheduling).
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), outer));
    const bool sums = sum_dy_xh || sum_dy;
    Tensor partial_buf = ctx.scratch(DataType::Double, {sums ? 2 * blocks * inner : 0});
    double* partial = partial_buf.data<double>();
    std::fill(partial, partial + partial_buf.numel(), 0.0);
    parallel_for(blocks, ctx.threads(), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        double* __restrict p_dyxh = sums ? partial + 2 * blk * inner : nullptr;
        double* __restrict p_dy = sums ? p_dyxh + inner : nullptr;
        for (int64_t r = outer * blk / blocks; r < outer * (blk + 1) / blocks; ++r) {
          const T *__restrict xr = x + r * inner, *__restrict dr = dy + r * inner;
          // The next row's X (written by the forward long before) and dY asked for now
          // (prefetch.h).
          if (r + 1 < outer) {
            prefetch_lines(xr + inner, inner);
            prefetch_lines(dr + inner, inner);
          }
          const double mu = static_cast<double>(mean[r]), iv = static_cast<double>(inv[r]);
          // Pass 1: sum g and sum g * xhat over the row.
          double sg[kLanes] = {}, sgx[kLanes] = {};
          int64_t i = 0;
          for (; i + kLanes <= inner; i += kLanes)
            for (int l = 0; l < kLanes; ++l) {
              const double xh = (static_cast<double>(xr[i + l]) - mu) * iv;
              const double d = static_cast<double>(dr[i + l]);
              const double g = d * static_cast<double>(s[i + l]);
              sg[l] += g;
              sgx[l] += g * xh;
            }
          for (; i < inner; ++i) {
            const double xh = (static_cast<double>(xr[i]) - mu) * iv;
            const double g = static_cast<double>(dr[i]) * static_cast<double>(s[i]);
            sg[0] += g;
            sgx[0] += g * xh;
          }
          double a = 0, b = 0;
          for (int l = 0; l < kLanes; ++l) a += sg[l], b += sgx[l];
          a /= static_cast<double>(inner);
          b /= static_cast<double>(inner);
          // Pass 2: dx = inv * (g - a - xhat * b), and the column sums.
          T* __restrict out = dx + r * inner;
          for (int64_t j = 0; j < inner; ++j) {
            const double xh = (static_cast<double>(xr[j]) - mu) * iv;
            const double d = static_cast<double>(dr[j]);
            out[j] = static_cast<T>(iv * (d * static_cast<double>(s[j]) - a - xh * b));
            if (sums) {  // loop-invariant: the compiler keeps two copies of the loop
              p_dyxh[j] += d * xh;
              p_dy[j] += d;
            }
          }
        }
      }
    });
    for (int64_t j = 0; sums && j < inner; ++j) {
      double t_dyxh = 0, t_dy = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        t_dyxh += partial[static_cast<size_t>(2 * blk * inner + j)];
        t_dy += partial[static_cast<size_t>((2 * blk + 1) * inner + j)];
      }
      if (sum_dy_xh) sum_dy_xh[j] = static_cast<T>(t_dyxh);
      if (sum_dy) sum_dy[j] = static_cast<T>(t_dy);
    }
  }

  int64_t axis_;
};

}  // namespace

void register_layer_norm_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "LayerNormalizationGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<LayerNormalizationGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
