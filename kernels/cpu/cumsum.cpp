// CumSum: running sums along the axis given as input 1 (exclusive and reverse variants).
#include <climits>

#include "kernels/cpu/reduce_plan.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

using CumSumTypes = TypeList<float, double, float16, bfloat16, int32_t, int64_t, uint32_t, uint64_t>;

class CumSumKernel final : public Kernel {
 public:
  explicit CumSumKernel(const KernelInfo& info)
      : exclusive_(info.node.attr_int("exclusive", 0) != 0),
        reverse_(info.node.attr_int("reverse", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 1, "[{}] input should have rank >= 1 but is a scalar", ctx.label());
    const int64_t axis = normalize_axis(scalar_int_input(ctx, 1, "axis"), x.rank(), ctx.label());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    const AxisSplit s = split_at_axis(x.shape(), axis);
    dispatch<CumSumTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      run<T>(x.data<T>(), y.data<T>(), s, ctx.threads());
    });
  }

 private:
  template <typename T>
  void run(const T* x, T* y, const AxisSplit& s, int threads) const {
    using A = acc_t<T>;
    const int64_t n = s.axis, inner = s.inner;
    const bool excl = exclusive_, rev = reverse_;
    // Walks the axis forwards or backwards; r is the position along it.
    auto pos = [n, rev](int64_t i) { return rev ? n - 1 - i : i; };
    if (inner == 1) {
      parallel_for(s.outer, threads, std::max<int64_t>(1, kReduceGrain / n),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = b; o < e; ++o) {
                       const T* src = x + o * n;
                       T* dst = y + o * n;
                       A acc = A(0);
                       for (int64_t i = 0; i < n; ++i) {
                         const int64_t r = pos(i);
                         const A v = static_cast<A>(src[r]);
                         if (excl) dst[r] = static_cast<T>(acc), acc = wrap_add(acc, v);
                         else acc = wrap_add(acc, v), dst[r] = static_cast<T>(acc);
                       }
                     }
                   });
      return;
    }
    const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
    parallel_for(s.outer * chunks, threads,
                 std::max<int64_t>(1, kReduceGrain / (n * std::min(inner, kColumnChunk))),
                 [&](int64_t b, int64_t e) {
                   A acc[kColumnChunk];
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
                     const int64_t len = std::min(kColumnChunk, inner - j0);
                     const int64_t base = k1 * n * inner + j0;
                     for (int64_t j = 0; j < len; ++j) acc[j] = A(0);
                     for (int64_t i = 0; i < n; ++i) {
                       const T* src = x + base + pos(i) * inner;
                       T* dst = y + base + pos(i) * inner;
                       if (excl) {
                         for (int64_t j = 0; j < len; ++j) {
                           dst[j] = static_cast<T>(acc[j]);
                           acc[j] = wrap_add(acc[j], static_cast<A>(src[j]));
                         }
                       } else {
                         for (int64_t j = 0; j < len; ++j) {
                           acc[j] = wrap_add(acc[j], static_cast<A>(src[j]));
                           dst[j] = static_cast<T>(acc[j]);
                         }
                       }
                     }
                   }
                 });
  }

  bool exclusive_;
  bool reverse_;
};

}  // namespace

void register_cumsum_kernels(KernelRegistry& r) {
  const std::vector<DataType> types =
      float_types() +
      std::vector<DataType>{DataType::Int32, DataType::Int64, DataType::UInt32, DataType::UInt64};
  r.add({"CumSum", "", 11, INT_MAX, "cpu", 0, types, make_factory<CumSumKernel>()});
}

}  // namespace onyx::cpu
