// ai.onyx SoftmaxCrossEntropyLossGrad: a training step's softmax cross-entropy loss and its
// scores' gradient in one pass over the scores. Training runs SoftmaxCrossEntropyLoss (scores ->
// loss, log_prob) and, in backward, ai.onyx SoftmaxCrossEntropyGrad(log_prob, labels, coef); the
// log-probabilities, as large as the scores, were written out by the one and read back by the
// other (a GPT-2-style model's [512, 16384] logits: 32 MB each way a step). The optimizer's
// fuse_softmax_cross_entropy_loss_grad (inference/fusions_loss_grad.cpp) takes the pair where
// nothing else reads log_prob; here each sample's log-probabilities are made in the gradient's
// buffer and turned into the gradient there while in cache (softmax_cross_entropy_rows.h: the
// two kernels' own row code, so the same bits).
//
//   inputs:  scores [N, C, d...] (float or double), labels [N, d...] (int32 or int64; the
//            loss's), grad_labels int64 [N, d...] (the gradient's), coef (one value or
//            [N, 1, d...]), weight [C] (optional)
//   attrs:   reduction ("none", "sum", "mean"), ignore_index: SoftmaxCrossEntropyLoss's
//   outputs: loss (SoftmaxCrossEntropyLoss's output 0), dX = (softmax - onehot) * coef
#include <climits>
#include <vector>

#include "graph/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/softmax_cross_entropy_rows.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

class SoftmaxCrossEntropyLossGradKernel final : public Kernel {
 public:
  explicit SoftmaxCrossEntropyLossGradKernel(const KernelInfo& info) : attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& x = ctx.required_input(0);
    const Tensor& target = ctx.required_input(1);
    const Tensor& grad_labels = ctx.required_input(2);
    const Tensor& K = ctx.required_input(3);
    const Tensor* weight = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const std::vector<int64_t> t = sce::checked_targets(who, x, target, weight, attrs_);
    const int64_t N = x.dim(0), C = x.dim(1), D = x.numel() / std::max<int64_t>(1, N * C);
    const Shape& want_t = target.shape();
    ONYX_CHECK(grad_labels.dtype() == DataType::Int64 && grad_labels.shape() == want_t,
               "[{}] grad_labels must be int64 {} for scores {}, got {} {}", who,
               shape_str(want_t), shape_str(x.shape()), dtype_name(grad_labels.dtype()),
               shape_str(grad_labels.shape()));
    Shape coef_shape = x.shape();
    coef_shape[1] = 1;
    const bool scalar = K.numel() == 1;
    ONYX_CHECK(K.dtype() == x.dtype() && (scalar || K.shape() == coef_shape),
               "[{}] coef must be one {} value or {} {}, got {} {}", who, dtype_name(x.dtype()),
               dtype_name(x.dtype()), shape_str(coef_shape), dtype_name(K.dtype()),
               shape_str(K.shape()));

    const bool per_position = attrs_.reduction == sce::Reduction::None;
    Tensor& loss = ctx.allocate_output(0, x.dtype(), per_position ? want_t : Shape{});
    Tensor& dX = ctx.allocate_output(1, x.dtype(), x.shape());
    if (x.numel() == 0) {
      dispatch<TypeList<float, double>>(x.dtype(), who, [&]<typename T>() {
        sce::reduce_loss<T>(t, N, C, D, nullptr, attrs_.has_ignore, attrs_.ignore,
                            attrs_.reduction, [](int64_t) { return 0.0; }, loss.data<T>());
      });
      return;
    }
    const int64_t* gl = grad_labels.data<int64_t>();
    dispatch<TypeList<float, double>>(x.dtype(), who, [&]<typename T>() {
      const T* xp = x.data<T>();
      const T* coef = K.data<T>();
      T* dx = dX.data<T>();
      // Each position's log-probability of its target, kept before the gradient overwrites it.
      std::vector<T> picked(static_cast<size_t>(N * D), T(0));
      parallel_for(N, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C * D)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t n = b; n < e; ++n) {
                       for (int64_t d = 0; d < D; ++d)
                         sce::log_softmax_row<T>(xp, dx, C, D, n * C * D + d, nullptr);
                       for (int64_t d = 0; d < D; ++d) {
                         const int64_t tv = t[static_cast<size_t>(n * D + d)];
                         if (tv >= 0 && tv < C)
                           picked[static_cast<size_t>(n * D + d)] = dx[(n * C + tv) * D + d];
                       }
                       sce::grad_block<T>(dx + n * C * D, dx + n * C * D, gl + n * D,
                                          scalar ? coef : coef + n * D, scalar, C, D);
                     }
                   });
      const T* w = weight ? weight->data<T>() : nullptr;
      sce::reduce_loss<T>(t, N, C, D, w, attrs_.has_ignore, attrs_.ignore,
                          attrs_.reduction,
                          [&](int64_t idx) {
                            const int64_t n = idx / (C * D), d = idx % D;
                            return static_cast<double>(picked[static_cast<size_t>(n * D + d)]);
                          },
                          loss.data<T>());
    });
  }

 private:
  sce::LossAttrs attrs_;
};

}  // namespace

void register_softmax_cross_entropy_loss_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "SoftmaxCrossEntropyLossGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<SoftmaxCrossEntropyLossGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
