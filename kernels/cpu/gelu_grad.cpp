// ai.onyx GeluGrad: the input gradient of GELU in one pass over dY and X.
// Training differentiates a GELU spelling (Erf or tanh form) as one Gelu
// (autodiff/training_graph.cpp), whose rule writes the derivative as ten (Erf) or sixteen (tanh)
// plain ONNX nodes, each a pass over the activation; the optimizer's fuse_gelu_grad
// (inference/fusions_gelu.cpp) swaps them for this.
//
//   inputs:  dY, X (one shape, one float dtype)      outputs: dX
//   attribute approximate: "none" (default) or "tanh"
//   none: dX = dY * (Phi(X) + X phi(X)), Phi the standard normal CDF, phi its density;
//   tanh: dX = dY * (0.5 (1 + t) + 0.5 X (1 - t^2) k (1 + 3 c X^2)), t = tanh(k (X + c X^3)),
//         k = sqrt(2 / pi), c = 0.044715 (GPT-2's "gelu_new").
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/simd/simd.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// The erf form's derivative times dy in double (float goes through the SIMD table).
void gelu_erf_grad_f64(const double* dy, const double* x, double* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    dx[i] = dy[i] * (0.5 * std::erfc(-v * M_SQRT1_2) + v * std::exp(-0.5 * v * v) * 0.5 *
                                                           M_2_SQRTPI * M_SQRT1_2);
  }
}

/// The tanh form's, likewise.
void gelu_tanh_grad_f64(const double* dy, const double* x, double* dx, int64_t n) {
  constexpr double k = 0.7978845608028654, c = 0.044715;
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i], v2 = v * v, t = std::tanh(k * v * (1 + c * v2));
    dx[i] = dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v2));
  }
}

class GeluGradKernel final : public Kernel {
 public:
  explicit GeluGradKernel(const KernelInfo& info) {
    const std::string approx = info.node.attr_string("approximate", "none");
    ONYX_CHECK(approx == "none" || approx == "tanh",
               "[{}] attribute approximate must be 'none' or 'tanh', found '{}'", info.node.label(),
               approx);
    tanh_ = approx == "tanh";
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& dY = ctx.required_input(0);
    const Tensor& X = ctx.required_input(1);
    ONYX_CHECK(dY.shape() == X.shape() && dY.dtype() == X.dtype(),
               "[{}] dY and X must have one shape and dtype, got {} {} and {} {}", ctx.label(),
               dtype_name(dY.dtype()), shape_str(dY.shape()), dtype_name(X.dtype()),
               shape_str(X.shape()));
    Tensor& dX = ctx.allocate_output(0, X.dtype(), X.shape());
    const int64_t n = X.numel();
    using Types = TypeList<float, double, float16, bfloat16>;
    dispatch<Types>(X.dtype(), ctx.label(), [&]<typename T>() {
      const T *dy = dY.data<T>(), *x = X.data<T>();
      T* dx = dX.data<T>();
      // float maps of the SIMD table for the form; double in libm's precision.
      const auto map = tanh_ ? simd().gelu_tanh_grad : simd().gelu_grad;
      parallel_for(n, ctx.threads(), kHalfBlock * 8, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>) {
          map(dy + b, x + b, dx + b, e - b);
        } else if constexpr (std::is_same_v<T, double>) {
          (tanh_ ? gelu_tanh_grad_f64 : gelu_erf_grad_f64)(dy + b, x + b, dx + b, e - b);
        } else {
          // 16-bit: a block at a time through float (half_convert.h).
          float fx[kHalfBlock], fdy[kHalfBlock];
          for (int64_t i = b; i < e; i += kHalfBlock) {
            const int64_t m = std::min(kHalfBlock, e - i);
            widen(x + i, fx, m);
            widen(dy + i, fdy, m);
            map(fdy, fx, fdy, m);
            narrow(fdy, dx + i, m);
          }
        }
      });
    });
  }

 private:
  bool tanh_ = false;
};

}  // namespace

void register_gelu_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "GeluGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<GeluGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
