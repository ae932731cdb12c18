// ai.onyx SoftmaxCrossEntropyGrad: the scores' gradient of SoftmaxCrossEntropyLoss in one pass.
// The loss rule (autodiff/rules_loss.cpp) writes it in plain ONNX as
//   Mul(Sub(Exp(log_prob), Cast(Equal(Unsqueeze(labels, [1]), arange(C)))), coef)
// five passes over the [N, C, ...] scores and a bool tensor (a GPT-2-style model's LM-head loss,
// 512 x 16384 logits: ~24 ms of a 324 ms bf16 training step); the optimizer's
// fuse_softmax_cross_entropy_grad (inference/fusions_loss_grad.cpp) swaps them for this.
//
//   inputs:  log_prob [N, C, d...] (float or double), labels int64 [N, d...] (a label outside
//            [0, C) marks no class, as Equal finds none), coef: one value, or [N, 1, d...]
//   outputs: dX = (exp(log_prob) - onehot(labels)) * coef, with the Exp kernel's exp: the bits
//            of the five nodes.
#include <algorithm>
#include <type_traits>

#include "graph/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_cross_entropy_rows.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

class SoftmaxCrossEntropyGradKernel final : public Kernel {
 public:
  explicit SoftmaxCrossEntropyGradKernel(const KernelInfo&) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& LP = ctx.required_input(0);
    const Tensor& L = ctx.required_input(1);
    const Tensor& K = ctx.required_input(2);
    const Shape& s = LP.shape();
    ONYX_CHECK(s.size() >= 2, "[{}] log_prob must be [N, C, ...], got {}", ctx.label(), shape_str(s));
    Shape label_shape = s;
    label_shape.erase(label_shape.begin() + 1);
    ONYX_CHECK(L.dtype() == DataType::Int64 && L.shape() == label_shape,
               "[{}] labels must be int64 {} for log_prob {}, got {} {}", ctx.label(),
               shape_str(label_shape), shape_str(s), dtype_name(L.dtype()), shape_str(L.shape()));
    Shape coef_shape = s;
    coef_shape[1] = 1;
    const bool scalar = K.numel() == 1;
    ONYX_CHECK(K.dtype() == LP.dtype() && (scalar || K.shape() == coef_shape),
               "[{}] coef must be one {} value or {} {}, got {} {}", ctx.label(),
               dtype_name(LP.dtype()), dtype_name(LP.dtype()), shape_str(coef_shape),
               dtype_name(K.dtype()), shape_str(K.shape()));
    Tensor& dX = ctx.allocate_output(0, LP.dtype(), s);
    const int64_t N = s[0], C = s[1], D = shape_numel(s) / std::max<int64_t>(1, N * C);
    if (dX.numel() == 0) return;
    const int64_t* labels = L.data<int64_t>();
    dispatch<TypeList<float, double>>(LP.dtype(), ctx.label(), [&]<typename T>() {
      const T* lp = LP.data<T>();
      const T* coef = K.data<T>();
      T* dx = dX.data<T>();
      // One sample's [C, D] block per task: exp, minus 1 at each position's class, times coef.
      parallel_for(N, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C * D)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t n = b; n < e; ++n)
                       sce::grad_block<T>(lp + n * C * D, dx + n * C * D, labels + n * D,
                                          scalar ? coef : coef + n * D, scalar, C, D);
                   });
    });
  }
};

}  // namespace

void register_softmax_cross_entropy_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "SoftmaxCrossEntropyGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<SoftmaxCrossEntropyGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
