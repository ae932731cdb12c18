// CausalConvWithState: depthwise causal 1-D convolution over [batch, channels, length] that
// carries the last k-1 input positions between calls (Mamba / Gated DeltaNet decode).
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using CausalConvTypes = TypeList<float, float16, bfloat16>;

class CausalConvWithStateKernel final : public Kernel {
 public:
  explicit CausalConvWithStateKernel(const KernelInfo& info) {
    std::string act = info.node.attr_string("activation", "none");
    ONYX_CHECK(act == "none" || act == "silu" || act == "swish",
               "[{}] activation should be 'none', 'silu' or 'swish' but is '{}'", info.label(),
               act);
    silu_ = act != "none";
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& w = ctx.required_input(1);
    const Tensor* bias = ctx.input(2);
    const Tensor* past = ctx.input(3);
    ONYX_CHECK(x.rank() == 3, "[{}] input should be [batch, channels, length] but is {}",
               ctx.label(), shape_str(x.shape()));
    int64_t batch = x.shape()[0], chans = x.shape()[1], len = x.shape()[2];
    ONYX_CHECK(w.rank() == 3 && w.shape()[0] == chans && w.shape()[1] == 1 && w.shape()[2] >= 1,
               "[{}] weight should be [{}, 1, k] with k >= 1 but is {}", ctx.label(), chans,
               shape_str(w.shape()));
    int64_t k = w.shape()[2], keep = k - 1;
    check_same_dtype(ctx, x, w, "weight");
    if (bias) {
      check_same_dtype(ctx, x, *bias, "bias");
      ONYX_CHECK(bias->shape() == Shape{chans}, "[{}] bias should be [{}] but is {}", ctx.label(),
                 chans, shape_str(bias->shape()));
    }
    if (past) {
      check_same_dtype(ctx, x, *past, "past_state");
      ONYX_CHECK(past->shape() == (Shape{batch, chans, keep}),
                 "[{}] past_state should be {} but is {}", ctx.label(),
                 shape_str({batch, chans, keep}), shape_str(past->shape()));
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    Tensor& state = ctx.allocate_output(1, x.dtype(), {batch, chans, keep});
    dispatch<CausalConvTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* xs = x.data<T>();
      const T* ws = w.data<T>();
      const T* bs = bias ? bias->data<T>() : nullptr;
      const T* ps = past ? past->data<T>() : nullptr;
      T* ys = y.data<T>();
      T* ss = state.data<T>();
      parallel_for(batch * chans, ctx.threads(), 64, [&](int64_t b, int64_t e) {
        std::vector<float> padded(static_cast<size_t>(keep + len));
        for (int64_t row = b; row < e; ++row) {
          // Row = past state (or zeros) followed by the new input.
          for (int64_t i = 0; i < keep; ++i) padded[i] = ps ? float(ps[row * keep + i]) : 0.0f;
          for (int64_t i = 0; i < len; ++i) padded[keep + i] = float(xs[row * len + i]);
          const T* wr = ws + (row % chans) * k;
          float b0 = bs ? float(bs[row % chans]) : 0.0f;
          for (int64_t t = 0; t < len; ++t) {
            float acc = b0;
            for (int64_t j = 0; j < k; ++j) acc += float(wr[j]) * padded[t + j];
            // Round to T before the activation, as the reference does.
            float v = float(T(acc));
            ys[row * len + t] = T(silu_ ? v / (1.0f + std::exp(-v)) : v);
          }
          for (int64_t i = 0; i < keep; ++i) ss[row * keep + i] = T(padded[len + i]);
        }
      });
    });
  }

 private:
  static void check_same_dtype(const KernelContext& ctx, const Tensor& x, const Tensor& t,
                               const char* what) {
    ONYX_CHECK(t.dtype() == x.dtype(), "[{}] {} should be {} like input but is {}", ctx.label(),
               what, dtype_name(x.dtype()), dtype_name(t.dtype()));
  }

  bool silu_ = false;
};

}  // namespace

void register_causal_conv_kernels(KernelRegistry& r) {
  r.add({"CausalConvWithState",
         "",
         27,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float, DataType::Float16, DataType::BFloat16},
         make_factory<CausalConvWithStateKernel>()});
}

}  // namespace onyx::cpu
