// LpNormalization (x / ||x||_p along an axis, p = 1 or 2) and MeanVarianceNormalization
// ((x - mean) / (std + 1e-9) over a set of axes, as in ONNX's function body).
#include <climits>

#include "kernels/cpu/reduce_plan.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

class LpNormalizationKernel final : public Kernel {
 public:
  explicit LpNormalizationKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", -1)), p_(info.node.attr_int("p", 2)) {
    ONYX_CHECK(p_ == 1 || p_ == 2, "[{}] attribute p should be 1 or 2 but is {}", info.label(), p_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 1, "[{}] input should have rank >= 1 but is a scalar", ctx.label());
    const int64_t axis = normalize_axis(axis_, x.rank(), ctx.label());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    std::vector<bool> reduced(x.rank(), false);
    reduced[axis] = true;
    const ReducePlan plan = make_reduce_plan(x.shape(), reduced);
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      std::vector<A> inv(plan.out_numel, A(0));
      const bool l1 = p_ == 1;
      for_each_reduced(plan, ctx.threads(), [&](int64_t o, int64_t off) {
        const A v = static_cast<A>(src[off]);
        inv[o] += l1 ? std::abs(v) : v * v;
      });
      // A zero norm gives zeros (the conformance data expects 0, not NaN).
      for (A& n : inv) {
        const A norm = l1 ? n : std::sqrt(n);
        n = norm == A(0) ? A(0) : A(1) / norm;
      }
      for_each_reduced(plan, ctx.threads(), [&](int64_t o, int64_t off) {
        dst[off] = static_cast<T>(static_cast<A>(src[off]) * inv[o]);
      });
    });
  }

 private:
  int64_t axis_;
  int64_t p_;
};

class MeanVarianceNormalizationKernel final : public Kernel {
 public:
  explicit MeanVarianceNormalizationKernel(const KernelInfo& info)
      : axes_(info.node.attr_ints("axes", {0, 2, 3})) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    std::vector<bool> reduced(x.rank(), false);
    for (int64_t a : axes_) {
      const int64_t ax = normalize_axis(a, x.rank(), ctx.label());
      ONYX_CHECK(!reduced[ax], "[{}] axes {} name axis {} twice", ctx.label(), fmt::join(axes_, ","),
                 ax);
      reduced[ax] = true;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    const ReducePlan plan = make_reduce_plan(x.shape(), reduced);
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      const A n = static_cast<A>(plan.red_numel);
      std::vector<A> mean(plan.out_numel, A(0)), scale(plan.out_numel, A(0));
      for_each_reduced(plan, ctx.threads(),
                       [&](int64_t o, int64_t off) { mean[o] += static_cast<A>(src[off]); });
      for (A& m : mean) m /= n;
      // Two-pass variance: as exact as E[x^2] - E[x]^2 in exact arithmetic, stabler in floats.
      for_each_reduced(plan, ctx.threads(), [&](int64_t o, int64_t off) {
        const A d = static_cast<A>(src[off]) - mean[o];
        scale[o] += d * d;
      });
      for (A& s : scale) s = A(1) / (std::sqrt(s / n) + A(1e-9));
      for_each_reduced(plan, ctx.threads(), [&](int64_t o, int64_t off) {
        dst[off] = static_cast<T>((static_cast<A>(src[off]) - mean[o]) * scale[o]);
      });
    });
  }

 private:
  std::vector<int64_t> axes_;
};

}  // namespace

void register_lp_norm_kernels(KernelRegistry& r) {
  r.add({"LpNormalization", "", 1, INT_MAX, "cpu", 0, float_types(),
         make_factory<LpNormalizationKernel>()});
  r.add({"MeanVarianceNormalization", "", 9, INT_MAX, "cpu", 0, float_types(),
         make_factory<MeanVarianceNormalizationKernel>()});
}

}  // namespace onyx::cpu
