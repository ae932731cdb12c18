// Softmax, LogSoftmax, Hardmax. Opset < 13 coerces the input to 2-D at `axis` (default 1)
// and normalises each row; opset >= 13 works along `axis` (default -1). Softmax subtracts the
// maximum first, so large inputs do not overflow.
#include <bit>
#include <climits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_plan.h"
#include "kernels/dispatch.h"

namespace onyx::cpu {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

/// exp for float without branches or libm calls, so loops over it vectorise (Cephes
/// polynomial, relative error ~2e-7; inputs clamped to [-87, 88]).
inline float exp_vec(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  return e * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}
inline float fast_exp(float x) { return exp_vec(x); }
inline double fast_exp(double x) { return std::exp(x); }

/// Maximum and sum of a contiguous row, in independent lanes so the loops vectorise.
template <typename A>
A row_max(const A* x, int64_t n) {
  constexpr int kLanes = 16;
  A lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  A m = lanes[0];
  for (int l = 1; l < kLanes; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
template <typename A>
A row_sum(const A* x, int64_t n) {
  constexpr int kLanes = 16;
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l];
  A s = A(0);
  for (int l = 0; l < kLanes; ++l) s += lanes[l];
  for (; i < n; ++i) s += x[i];
  return s;
}

/// One contiguous row in the compute type A; `x` and `y` may alias.
template <typename A>
void row_kernel(SoftmaxKind kind, const A* x, A* y, int64_t n) {
  if (kind == SoftmaxKind::Hardmax) {
    int64_t idx = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > x[idx]) idx = i;
    for (int64_t i = 0; i < n; ++i) y[i] = A(0);
    y[idx] = A(1);
    return;
  }
  const A m = row_max(x, n);
  if (kind == SoftmaxKind::Softmax) {
    for (int64_t i = 0; i < n; ++i) y[i] = fast_exp(x[i] - m);
    const A inv = A(1) / row_sum(y, n);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    return;
  }
  // LogSoftmax: exponentials go to a small block buffer since y may alias x.
  constexpr int64_t kBlock = 256;
  A e[kBlock];
  A sum = A(0);
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t len = std::min(kBlock, n - i0);
    for (int64_t i = 0; i < len; ++i) e[i] = fast_exp(x[i0 + i] - m);
    sum += row_sum(e, len);
  }
  const A shift = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
}

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(const KernelInfo& info, SoftmaxKind kind)
      : kind_(kind),
        coerce_2d_(info.opset < 13),
        axis_(info.node.attr_int("axis", info.opset < 13 ? 1 : -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    // A scalar is a one-element row.
    const int64_t rank = std::max<int64_t>(x.rank(), 1);
    const int64_t axis = normalize_axis(axis_, rank, ctx.label());
    const Shape shape = x.rank() ? x.shape() : Shape{1};
    const AxisSplit s = coerce_2d_ ? split_2d(shape, axis) : split_at_axis(shape, axis);
    if (y.numel() == 0) return;
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      if (s.inner == 1) rows<T>(x.data<T>(), y.data<T>(), s, ctx.threads());
      else columns<T>(x.data<T>(), y.data<T>(), s, ctx.threads());
    });
  }

 private:
  template <typename T>
  void rows(const T* x, T* y, const AxisSplit& s, int threads) const {
    using A = acc_t<T>;
    const int64_t n = s.axis;
    parallel_for(s.outer, threads, std::max<int64_t>(1, kReduceGrain / n),
                 [&](int64_t b, int64_t e) {
                   std::vector<A> buf(std::is_same_v<A, T> ? 0 : n);
                   for (int64_t o = b; o < e; ++o) {
                     if constexpr (std::is_same_v<A, T>) {
                       row_kernel<A>(kind_, x + o * n, y + o * n, n);
                     } else {  // 16-bit floats: compute the row in float
                       for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<A>(x[o * n + i]);
                       row_kernel<A>(kind_, buf.data(), buf.data(), n);
                       for (int64_t i = 0; i < n; ++i) y[o * n + i] = static_cast<T>(buf[i]);
                     }
                   }
                 });
  }

  // Axis not innermost (opset >= 13): process a chunk of contiguous columns at a time.
  template <typename T>
  void columns(const T* x, T* y, const AxisSplit& s, int threads) const {
    using A = acc_t<T>;
    const int64_t n = s.axis, inner = s.inner;
    const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
    const SoftmaxKind kind = kind_;
    parallel_for(
        s.outer * chunks, threads,
        std::max<int64_t>(1, kReduceGrain / (n * std::min(inner, kColumnChunk))),
        [&](int64_t b, int64_t e) {
          A m[kColumnChunk], sum[kColumnChunk];
          int64_t idx[kColumnChunk];
          for (int64_t t = b; t < e; ++t) {
            const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
            const int64_t len = std::min(kColumnChunk, inner - j0);
            const T* xs = x + k1 * n * inner + j0;
            T* ys = y + k1 * n * inner + j0;
            for (int64_t j = 0; j < len; ++j) m[j] = static_cast<A>(xs[j]), sum[j] = A(0), idx[j] = 0;
            for (int64_t r = 1; r < n; ++r) {
              const T* row = xs + r * inner;
              for (int64_t j = 0; j < len; ++j) {
                const A v = static_cast<A>(row[j]);
                if (v > m[j]) m[j] = v, idx[j] = r;
              }
            }
            if (kind == SoftmaxKind::Hardmax) {
              for (int64_t r = 0; r < n; ++r)
                for (int64_t j = 0; j < len; ++j) ys[r * inner + j] = static_cast<T>(A(idx[j] == r));
              continue;
            }
            for (int64_t r = 0; r < n; ++r) {
              const T* row = xs + r * inner;
              for (int64_t j = 0; j < len; ++j) sum[j] += fast_exp(static_cast<A>(row[j]) - m[j]);
            }
            if (kind == SoftmaxKind::Softmax) {
              for (int64_t j = 0; j < len; ++j) sum[j] = A(1) / sum[j];
              for (int64_t r = 0; r < n; ++r)
                for (int64_t j = 0; j < len; ++j)
                  ys[r * inner + j] =
                      static_cast<T>(fast_exp(static_cast<A>(xs[r * inner + j]) - m[j]) * sum[j]);
            } else {
              for (int64_t j = 0; j < len; ++j) sum[j] = m[j] + std::log(sum[j]);
              for (int64_t r = 0; r < n; ++r)
                for (int64_t j = 0; j < len; ++j)
                  ys[r * inner + j] = static_cast<T>(static_cast<A>(xs[r * inner + j]) - sum[j]);
            }
          }
        });
  }

  SoftmaxKind kind_;
  bool coerce_2d_;
  int64_t axis_;
};

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  const std::pair<const char*, SoftmaxKind> ops[] = {{"Softmax", SoftmaxKind::Softmax},
                                                     {"LogSoftmax", SoftmaxKind::LogSoftmax},
                                                     {"Hardmax", SoftmaxKind::Hardmax}};
  for (const auto& [op, kind] : ops) {
    r.add({op, "", 1, INT_MAX, "cpu", 0, float_types(),
           [kind](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<SoftmaxKernel>(info, kind);
           }});
  }
}

}  // namespace onyx::cpu
