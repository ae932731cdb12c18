// ArgMax, ArgMin: int64 index of the extreme along one axis (first one, or last one with
// select_last_index); NaN counts as the extreme, like numpy.
#include <climits>

#include "kernels/cpu/reduce_plan.h"
#include "kernels/reduce_axes.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

class ArgReduceKernel final : public Kernel {
 public:
  ArgReduceKernel(const KernelInfo& info, bool is_max) : is_max_(is_max), attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    int64_t axis = 0;
    const Shape out_shape = arg_reduce_shape(ctx, attrs_, x.shape(), axis);
    const AxisSplit s = split_at_axis(x.shape(), axis);
    Tensor& y = ctx.allocate_output(0, DataType::Int64, out_shape);
    if (y.numel() == 0) return;
    dispatch<NumericTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data<T>();
      int64_t* dst = y.data<int64_t>();
      if (is_max_) {
        if (attrs_.select_last) run<T, true, true>(src, dst, s, ctx.threads());
        else run<T, true, false>(src, dst, s, ctx.threads());
      } else {
        if (attrs_.select_last) run<T, false, true>(src, dst, s, ctx.threads());
        else run<T, false, false>(src, dst, s, ctx.threads());
      }
    });
  }

 private:
  /// True when v, at a later index, replaces the current best b. Branch-free (`|`, `&`) so
  /// the loops vectorise.
  template <typename A, bool kMax, bool kLast>
  static bool beats(A v, A b) {
    const bool vn = v != v, bn = b != b, b_number = !bn;
    bool better;
    if constexpr (kMax) better = kLast ? v >= b : v > b;
    else better = kLast ? v <= b : v < b;
    return (bn & kLast & vn) | (b_number & (vn | better));
  }

  template <typename T, bool kMax, bool kLast>
  static void run(const T* x, int64_t* y, const AxisSplit& s, int threads) {
    using A = acc_t<T>;
    const int64_t n = s.axis, inner = s.inner;
    if (inner == 1) {
      parallel_for(s.outer, threads, std::max<int64_t>(1, kReduceGrain / n),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = b; o < e; ++o) y[o] = arg_row<T, kMax, kLast>(x + o * n, n);
                   });
      return;
    }
    const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
    parallel_for(s.outer * chunks, threads,
                 std::max<int64_t>(1, kReduceGrain / (n * std::min(inner, kColumnChunk))),
                 [&](int64_t b, int64_t e) {
                   A best[kColumnChunk];
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
                     const int64_t len = std::min(kColumnChunk, inner - j0);
                     const T* base = x + k1 * n * inner + j0;
                     int64_t* out = y + k1 * inner + j0;
                     for (int64_t j = 0; j < len; ++j) best[j] = static_cast<A>(base[j]), out[j] = 0;
                     for (int64_t r = 1; r < n; ++r) {
                       const T* row = base + r * inner;
                       for (int64_t j = 0; j < len; ++j) {
                         const A v = static_cast<A>(row[j]);
                         const bool take = beats<A, kMax, kLast>(v, best[j]);
                         best[j] = take ? v : best[j];
                         out[j] = take ? r : out[j];
                       }
                     }
                   }
                 });
  }

  /// Index of the extreme of one contiguous row: 8 interleaved lanes, then the lanes merged.
  template <typename T, bool kMax, bool kLast>
  static int64_t arg_row(const T* row, int64_t n) {
    using A = acc_t<T>;
    constexpr int kLanes = 8;
    if (n < 2 * kLanes) {
      A best = static_cast<A>(row[0]);
      int64_t idx = 0;
      for (int64_t r = 1; r < n; ++r) {
        const A v = static_cast<A>(row[r]);
        if (beats<A, kMax, kLast>(v, best)) best = v, idx = r;
      }
      return idx;
    }
    A bv[kLanes];
    int64_t bi[kLanes];
    for (int l = 0; l < kLanes; ++l) bv[l] = static_cast<A>(row[l]), bi[l] = l;
    int64_t r = kLanes;
    for (; r + kLanes <= n; r += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const A v = static_cast<A>(row[r + l]);
        const bool take = beats<A, kMax, kLast>(v, bv[l]);
        bv[l] = take ? v : bv[l];
        bi[l] = take ? r + l : bi[l];
      }
    }
    for (int l = 0; r < n; ++r, ++l) {
      const A v = static_cast<A>(row[r]);
      if (beats<A, kMax, kLast>(v, bv[l])) bv[l] = v, bi[l] = r;
    }
    // Merge lanes: the winner under the same rules, ties going to the lower (or higher) index.
    A best = bv[0];
    int64_t idx = bi[0];
    for (int l = 1; l < kLanes; ++l) {
      const bool later = bi[l] > idx;
      const bool take = later ? beats<A, kMax, kLast>(bv[l], best) : !beats<A, kMax, kLast>(best, bv[l]);
      if (take) best = bv[l], idx = bi[l];
    }
    return idx;
  }

  bool is_max_;
  ArgReduceAttrs attrs_;
};

}  // namespace

void register_arg_reduce_kernels(KernelRegistry& r) {
  for (bool is_max : {true, false}) {
    r.add({is_max ? "ArgMax" : "ArgMin", "", 1, INT_MAX, "cpu", 0, numeric_types(),
           [is_max](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<ArgReduceKernel>(info, is_max);
           }});
  }
}

}  // namespace onyx::cpu
