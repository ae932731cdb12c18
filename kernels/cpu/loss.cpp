// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss over [N, C, d1, ...] inputs and
// [N, d1, ...] class targets: per-element loss -weight[t] * logp[n, t, d], where targets equal to
// ignore_index count as weight 0; reduction none, sum, or mean (divided by the sum of weights).
// SoftmaxCrossEntropyLoss also returns the log-probabilities as an optional second output.
#include <climits>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/softmax_cross_entropy_rows.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using sce::Reduction;

class LossKernel final : public Kernel {
 public:
  LossKernel(const KernelInfo& info, bool softmax) : softmax_(softmax), attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& x = ctx.required_input(0);
    const Tensor& target = ctx.required_input(1);
    const Tensor* weight = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const std::vector<int64_t> t = sce::checked_targets(who, x, target, weight, attrs_);
    const int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<int64_t>(1, N * C);
    const Shape& want_t = target.shape();

    Tensor& loss =
        ctx.allocate_output(0, x.dtype(), attrs_.reduction == Reduction::None ? want_t : Shape{});
    Tensor* logp_out = softmax_ && ctx.num_outputs() > 1 && ctx.output_wanted(1)
                           ? &ctx.allocate_output(1, x.dtype(), x.shape())
                           : nullptr;
    dispatch<FloatTypes>(x.dtype(), who, [&]<typename T>() {
      using A = acc_t<T>;
      const T* xp = x.data<T>();
      // Log-probabilities: the input itself for NLL, log-softmax over C for cross entropy;
      // written straight into the second output when it is wanted in the accumulation type.
      Tensor lp_buf;
      A* lp = nullptr;
      if (softmax_) {
        constexpr bool in_place = std::is_same_v<A, T>;
        if (in_place && logp_out) {
          lp_buf = *logp_out;
        } else {
          lp_buf = ctx.scratch(std::is_same_v<A, double> ? DataType::Double : DataType::Float,
                               x.shape());
        }
        lp = lp_buf.data<A>();
        // 16-bit floats: widened once in blocks, then log-softmaxed in place.
        const A* src;
        if constexpr (is_half_v<T>) {
          parallel_for(x.numel(), ctx.threads(), 1 << 15,
                       [&](int64_t b, int64_t e) { widen(xp + b, lp + b, e - b); });
          src = lp;
        } else {
          src = xp;
        }
        parallel_for(N * D, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C)),
                     [&](int64_t b, int64_t e) {
                       // exp(x - m) is wanted for its sum only: into the output row, or into
                       // a row of its own where the input was widened into the output.
                       std::vector<A> exps(src == lp && D == 1 ? static_cast<size_t>(C) : 0);
                       for (int64_t r = b; r < e; ++r)
                         sce::log_softmax_row<A>(src, lp, C, D, (r / D) * C * D + r % D,
                                                 exps.empty() ? nullptr : exps.data());
                     });
        if (logp_out && !(in_place && logp_out)) {
          T* o = logp_out->data<T>();
          if constexpr (is_half_v<T>)
            narrow(lp, o, x.numel());
          else
            for (int64_t i = 0; i < x.numel(); ++i) o[i] = static_cast<T>(lp[i]);
        }
      }
      const T* w = weight ? weight->data<T>() : nullptr;
      sce::reduce_loss<T>(t, N, C, D, w, attrs_.has_ignore, attrs_.ignore,
                          attrs_.reduction,
                          [&](int64_t idx) {
                            return softmax_ ? static_cast<double>(lp[idx])
                                            : static_cast<double>(xp[idx]);
                          },
                          loss.data<T>());
    });
  }

 private:
  bool softmax_;
  sce::LossAttrs attrs_;
};

}  // namespace

void register_loss_kernels(KernelRegistry& r) {
  r.add({"SoftmaxCrossEntropyLoss", "", 12, INT_MAX, "cpu", 0, float_types(),
         [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
           return std::make_unique<LossKernel>(info, true);
         }});
  r.add({"NegativeLogLikelihoodLoss", "", 12, INT_MAX, "cpu", 0, float_types(),
         [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
           return std::make_unique<LossKernel>(info, false);
         }});
}

}  // namespace onyx::cpu
