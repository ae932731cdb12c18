// TopK: the k largest (or smallest) elements along an axis and their int64 indices. Equal
// values keep the lower index first; NaN sorts above every number, like numpy.
#include <climits>

#include "kernels/cpu/reduce_plan.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

/// a < b with NaN greater than everything (a strict weak order on floats with NaN).
template <typename A>
bool nan_last_less(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (b != b) return a == a;
    if (a != a) return false;
  }
  return a < b;
}

class TopKKernel final : public Kernel {
 public:
  explicit TopKKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", -1)),
        largest_(info.node.attr_int("largest", 1) != 0),
        sorted_(info.node.attr_int("sorted", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 1, "[{}] input should have rank >= 1 but is a scalar", ctx.label());
    const int64_t k = scalar_int_input(ctx, 1, "K");
    const int64_t axis = normalize_axis(axis_, x.rank(), ctx.label());
    const AxisSplit s = split_at_axis(x.shape(), axis);
    ONYX_CHECK(k >= 0 && k <= s.axis, "[{}] K should be in [0, {}] (size of axis {}) but is {}",
               ctx.label(), s.axis, axis, k);
    Shape out_shape = x.shape();
    out_shape[axis] = k;
    Tensor& values = ctx.allocate_output(0, x.dtype(), out_shape);
    Tensor& indices = ctx.allocate_output(1, DataType::Int64, out_shape);
    if (values.numel() == 0) return;
    dispatch<NumericTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      run<T>(x.data<T>(), values.data<T>(), indices.data<int64_t>(), s, k, ctx.threads());
    });
  }

 private:
  template <typename T>
  void run(const T* x, T* vals, int64_t* idxs, const AxisSplit& s, int64_t k, int threads) const {
    using A = acc_t<T>;
    const int64_t n = s.axis, inner = s.inner;
    const bool largest = largest_, sorted = sorted_;
    parallel_for(s.outer * inner, threads, std::max<int64_t>(1, kReduceGrain / n),
                 [&](int64_t b, int64_t e) {
                   std::vector<std::pair<A, int64_t>> cand;
                   cand.reserve(n);
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t k1 = t / inner, j = t % inner;
                     const T* src = x + k1 * n * inner + j;
                     // Total order: by value (descending when largest), then by index.
                     auto before = [largest](const std::pair<A, int64_t>& p,
                                             const std::pair<A, int64_t>& q) {
                       const bool lt = largest ? nan_last_less(q.first, p.first)
                                               : nan_last_less(p.first, q.first);
                       const bool gt = largest ? nan_last_less(p.first, q.first)
                                               : nan_last_less(q.first, p.first);
                       return lt || (!gt && p.second < q.second);
                     };
                     cand.clear();
                     if (k > 0 && k * 16 < n) {
                       // Small k: a heap of the k best seen (worst on top); most elements are
                       // rejected by one comparison with the worst kept value.
                       for (int64_t r = 0; r < k; ++r) cand.emplace_back(static_cast<A>(src[r * inner]), r);
                       std::make_heap(cand.begin(), cand.end(), before);
                       A worst = cand.front().first;
                       for (int64_t r = k; r < n; ++r) {
                         const A v = static_cast<A>(src[r * inner]);
                         if (!(largest ? nan_last_less(worst, v) : nan_last_less(v, worst))) continue;
                         std::pop_heap(cand.begin(), cand.end(), before);
                         cand.back() = {v, r};
                         std::push_heap(cand.begin(), cand.end(), before);
                         worst = cand.front().first;
                       }
                     } else {
                       for (int64_t r = 0; r < n; ++r) cand.emplace_back(static_cast<A>(src[r * inner]), r);
                       if (k < n) std::nth_element(cand.begin(), cand.begin() + k, cand.end(), before);
                       cand.resize(k);
                     }
                     if (sorted) std::sort(cand.begin(), cand.end(), before);
                     else std::sort(cand.begin(), cand.end(), [](const auto& p, const auto& q) {
                       return p.second < q.second;  // unsorted output: index order
                     });
                     T* vo = vals + k1 * k * inner + j;
                     int64_t* io = idxs + k1 * k * inner + j;
                     for (int64_t r = 0; r < k; ++r) {
                       vo[r * inner] = src[cand[r].second * inner];
                       io[r * inner] = cand[r].second;
                     }
                   }
                 });
  }

  int64_t axis_;
  bool largest_;
  bool sorted_;
};

}  // namespace

void register_topk_kernels(KernelRegistry& r) {
  r.add({"TopK", "", 1, INT_MAX, "cpu", 0, numeric_types(), make_factory<TopKKernel>()});
}

}  // namespace onyx::cpu
