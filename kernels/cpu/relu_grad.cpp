// ai.onyx ReluGrad: the input gradient of ReLU in one pass over dY and Y. The Relu rule
// (autodiff/rules_activation.cpp) writes it as Where(Greater(Y, 0), dY, 0), two passes and a
// bool tensor between them; the optimizer's fuse_relu_grad (inference/fusions_relu_grad.cpp)
// swaps them for this.
//
//   inputs:  dY, Y (one shape, one float dtype)      outputs: dX
//   dX = Y > 0 ? dY : 0, as the two nodes select it: dY's bits where Y > 0, +0 elsewhere (NaN in
//   Y compares false).
#include <algorithm>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half_convert.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

class ReluGradKernel final : public Kernel {
 public:
  explicit ReluGradKernel(const KernelInfo&) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dY = ctx.required_input(0);
    const Tensor& Y = ctx.required_input(1);
    ONYX_CHECK(dY.shape() == Y.shape() && dY.dtype() == Y.dtype(),
               "[{}] dY and Y must have one shape and dtype, got {} {} and {} {}", ctx.label(),
               dtype_name(dY.dtype()), shape_str(dY.shape()), dtype_name(Y.dtype()),
               shape_str(Y.shape()));
    Tensor& dX = ctx.allocate_output(0, Y.dtype(), Y.shape());
    const int64_t n = Y.numel();
    using Types = TypeList<float, double, float16, bfloat16>;
    dispatch<Types>(Y.dtype(), ctx.label(), [&]<typename T>() {
      const T *dy = dY.data<T>(), *y = Y.data<T>();
      T* dx = dX.data<T>();
      parallel_for(n, ctx.threads(), kHalfBlock * 16, [&](int64_t b, int64_t e) {
        if constexpr (is_half_v<T>) {
          // The comparison through float, a block at a time (half_convert.h); dY is copied.
          float fy[kHalfBlock];
          for (int64_t i = b; i < e; i += kHalfBlock) {
            const int64_t m = std::min(kHalfBlock, e - i);
            widen(y + i, fy, m);
            for (int64_t j = 0; j < m; ++j) {
              const T d = dy[i + j];
              dx[i + j] = fy[j] > 0.0f ? d : T{};
            }
          }
        } else {
          // Both loads unconditional, so the loop vectorizes as a compare and a blend.
          for (int64_t i = b; i < e; ++i) {
            const T d = dy[i];
            dx[i] = y[i] > T(0) ? d : T(0);
          }
        }
      });
    });
  }
};

}  // namespace

void register_relu_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "ReluGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<ReluGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
