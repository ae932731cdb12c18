// ai.onyx AddSoftmax: Softmax(X + M) along X's last axis, with M broadcast to X (an attention
// mask or position bias added to the scores). Encoders exported by torch.onnx, and written by
// hand, add the mask to [batch, heads, seq, seq] scores and normalise the sum: two passes and a
// scores-sized tensor between them (BERT-base: 76 us of a layer's ~14 ms at 1 thread).
// fuse_add_softmax (inference/fusions_softmax.cpp) swaps the two nodes for this kernel, which
// writes each row's sum to the output row, takes its maximum in the same loop
// (SimdTable::add_softmax_row) and normalises the row there while it is in cache. The same bits
// as the two nodes: the same float additions, the same row softmax.
//
//   inputs:  X [..., n] float32, M float32 (rank <= X's, each dim 1 or X's)   outputs: Y (X's shape)
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_plan.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

class AddSoftmaxKernel final : public Kernel {
 public:
  explicit AddSoftmaxKernel(const KernelInfo&) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& M = ctx.required_input(1);
    ONYX_CHECK(X.dtype() == DataType::Float && M.dtype() == DataType::Float,
               "[{}] X and M must be float32, got {} and {}", ctx.label(), dtype_name(X.dtype()),
               dtype_name(M.dtype()));
    ONYX_CHECK(X.rank() >= 1 && M.rank() <= X.rank(),
               "[{}] M {} must broadcast to X {} (X of rank >= 1, M of rank at most X's)",
               ctx.label(), shape_str(M.shape()), shape_str(X.shape()));
    // M's element strides over X's dims: 0 where M has 1 (or lacks the dim).
    const size_t r = static_cast<size_t>(X.rank()), mr = static_cast<size_t>(M.rank());
    std::vector<int64_t> mstride(r, 0);
    int64_t step = 1;
    for (size_t i = 0; i < mr; ++i) {
      const size_t xd = r - 1 - i;
      const int64_t d = M.shape()[mr - 1 - i];
      ONYX_CHECK(d == 1 || d == X.shape()[xd],
                 "[{}] M {} must broadcast to X {}: dim {} from the end is {}, expected 1 or {}",
                 ctx.label(), shape_str(M.shape()), shape_str(X.shape()), i + 1, d,
                 X.shape()[xd]);
      if (d != 1) mstride[xd] = step;
      step *= d;
    }
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    if (Y.numel() == 0) return;
    const int64_t n = X.shape()[r - 1], rows = X.numel() / n;
    const float* x = X.data<float>();
    const float* m = M.data<float>();
    float* y = Y.data<float>();
    const bool m_row = mstride[r - 1] != 0;  // M varies along the row, else one value per row
    const auto add_softmax_row = simd().add_softmax_row;
    parallel_for(rows, ctx.threads(), std::max<int64_t>(1, kReduceGrain / n),
                 [&](int64_t b, int64_t e) {
                   // The outer index of row b, and M's offset for it.
                   std::vector<int64_t> idx(r - 1, 0);
                   int64_t off = 0;
                   for (size_t d = r - 1, t = static_cast<size_t>(b); d-- > 0;) {
                     idx[d] = static_cast<int64_t>(t % static_cast<size_t>(X.shape()[d]));
                     t /= static_cast<size_t>(X.shape()[d]);
                     off += idx[d] * mstride[d];
                   }
                   for (int64_t row = b; row < e; ++row) {
                     add_softmax_row(x + row * n, m + off, m_row, y + row * n, n);
                     for (size_t d = r - 1; d-- > 0;) {  // next row's index and offset
                       off += mstride[d];
                       if (++idx[d] < X.shape()[d]) break;
                       off -= mstride[d] * X.shape()[d];
                       idx[d] = 0;
                     }
                   }
                 });
  }
};

}  // namespace

void register_add_softmax_kernels(KernelRegistry& r) {
  r.add({.op_type = "AddSoftmax",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<AddSoftmaxKernel>(i);
         }});
}

}  // namespace onyx::cpu
