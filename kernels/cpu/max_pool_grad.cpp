// ai.onyx MaxPoolGrad: the input gradient of MaxPool, dY added at the argmax Indices, one
// (n, c) plane per task. The MaxPool rule (autodiff/rules_nn.cpp) writes it in plain ONNX as
//   ScatterElements(Expand(0, [numel(X)]), Reshape(Indices, [-1]), Reshape(dY, [-1]), axis 0, add)
// which fills a zero tensor, copies it and scatters on one thread (a torch ResNet-18's step at 2
// threads: 2.3 ms, 2.6 %); the optimizer's fuse_max_pool_grad (inference/fusions_max_pool_grad.cpp)
// swaps it for this.
//
//   inputs:  dY (float, double, bfloat16 or float16: mixed precision pools in the activations'
//            type), Indices (int64, MaxPool's second output: [N, C, spatial...],
//            row-major flat indices into X), shape (int64 1-D, the output's shape: [numel(X)])
//   outputs: dX of `shape`, zero except dY's values added at their indices
// Each plane's updates are added in the order ScatterElements adds them, so the bits are its.
// An index outside its own (n, c) plane of X (no MaxPool writes one) is an onyx::Error.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "graph/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

class MaxPoolGradKernel final : public Kernel {
 public:
  explicit MaxPoolGradKernel(const KernelInfo&) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& dY = ctx.required_input(0);
    const Tensor& I = ctx.required_input(1);
    const Tensor& shape_t = ctx.required_input(2);
    ONYX_CHECK(I.dtype() == DataType::Int64 && I.rank() >= 3,
               "[{}] Indices must be int64 [N, C, spatial...] (MaxPool's second output), got {} {}",
               ctx.label(), dtype_name(I.dtype()), shape_str(I.shape()));
    ONYX_CHECK(dY.numel() == I.numel(), "[{}] dY {} and Indices {} must have as many elements",
               ctx.label(), shape_str(dY.shape()), shape_str(I.shape()));
    ONYX_CHECK(shape_t.dtype() == DataType::Int64 && shape_t.rank() == 1,
               "[{}] shape must be a 1-D int64 tensor, got {} {}", ctx.label(),
               dtype_name(shape_t.dtype()), shape_str(shape_t.shape()));
    Shape out(shape_t.data<int64_t>(), shape_t.data<int64_t>() + shape_t.numel());
    for (int64_t d : out)
      ONYX_CHECK(d >= 0, "[{}] the output shape {} has a negative dim", ctx.label(), shape_str(out));
    const int64_t planes = I.dim(0) * I.dim(1), total = shape_numel(out);
    ONYX_CHECK(planes > 0 ? total % planes == 0 : total == 0,
               "[{}] an output of {} elements does not split into the {} (N x C) planes of Indices {}",
               ctx.label(), total, planes, shape_str(I.shape()));
    Tensor& dX = ctx.allocate_output(0, dY.dtype(), out);
    if (total == 0) return;
    const int64_t plane_in = total / planes, plane_out = I.numel() / planes;
    const int64_t* idx = I.data<int64_t>();
    std::atomic<int64_t> bad{-1};  // the flat position of an index outside its plane
    using Types = TypeList<float, double, bfloat16, float16>;
    dispatch<Types>(dY.dtype(), ctx.label(), [&]<typename T>() {
      const T* dy = dY.data<T>();
      T* dx = dX.data<T>();
      const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(plane_in, 1));
      parallel_for(planes, ctx.threads(), grain, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          T* plane = dx + p * plane_in;
          std::memset(static_cast<void*>(plane), 0, static_cast<size_t>(plane_in) * sizeof(T));
          const int64_t lo = p * plane_in;
          for (int64_t j = p * plane_out; j < (p + 1) * plane_out; ++j) {
            const int64_t at = idx[j] - lo;
            if (at < 0 || at >= plane_in) {
              int64_t none = -1;
              bad.compare_exchange_strong(none, j);
              return;
            }
            using A = acc_t<T>;  // each add rounded to T, as ScatterElements' add rounds it
            plane[at] = T(static_cast<A>(A(plane[at]) + A(dy[j])));
          }
        }
      });
    });
    const int64_t j = bad.load();
    ONYX_CHECK(j < 0,
               "[{}] index {} at position {} of Indices {} is outside its plane [{}, {}) of the "
               "output {}: Indices must be MaxPool's row-major argmax",
               ctx.label(), j >= 0 ? idx[j] : 0, j, shape_str(I.shape()),
               j >= 0 ? j / plane_out * plane_in : 0, j >= 0 ? (j / plane_out + 1) * plane_in : 0,
               shape_str(out));
  }
};

}  // namespace

void register_max_pool_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "MaxPoolGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double, DataType::BFloat16, DataType::Float16},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<MaxPoolGradKernel>(i);
         },
         .host_inputs = {2}});
}

}  // namespace onyx::cpu
