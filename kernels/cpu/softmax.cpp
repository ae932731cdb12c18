// Softmax, LogSoftmax, Hardmax. Opset < 13 coerces the input to 2-D at `axis` (default 1)
// and normalises each row; opset >= 13 works along `axis` (default -1). Softmax subtracts the
// maximum first, so large inputs do not overflow; float exp runs a vector
// of the active ISA at a time (8 lanes with AVX2, 16 with AVX-512).
#include <bit>
#include <climits>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/reduce_plan.h"
#include "kernels/cpu/simd/simd.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

/// out[i] = exp(x[i] - m[i]) when `per_elem`, else exp(x[i] - m[0]); returns the sum of out.
/// float32 runs the active ISA's vector loop (simd/simd_body.inc).
inline float exp_minus(const float* x, const float* m, bool per_elem, float* out, int64_t n) {
  return simd().exp_minus(x, m, per_elem, out, n);
}
inline double exp_minus(const double* x, const double* m, bool per_elem, double* out,
                        int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += out[i] = std::exp(x[i] - m[per_elem ? i : 0]);
  return sum;
}

/// Maximum of a contiguous row, in independent lanes so the loop vectorises.
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
template <>
float row_max<float>(const float* x, int64_t n) {
  return simd().row_max(x, n);
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
  if constexpr (std::is_same_v<A, float>) {
    if (kind == SoftmaxKind::Softmax) return simd().softmax_row(x, y, n);
  }
  const A m = row_max(x, n);
  if (kind == SoftmaxKind::Softmax) {
    const A inv = A(1) / exp_minus(x, &m, false, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    return;
  }
  // LogSoftmax: exponentials go to a block buffer since y may alias x.
  A e[kColumnChunk];
  A sum = A(0);
  for (int64_t i0 = 0; i0 < n; i0 += kColumnChunk) {
    const int64_t len = std::min(kColumnChunk, n - i0);
    sum += exp_minus(x + i0, &m, false, e, len);
  }
  const A shift = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
}

/// Columns [0, len) of an [n, inner] block, normalised along n.
template <typename T>
void column_chunk(SoftmaxKind kind, const T* xs, T* ys, int64_t n, int64_t inner, int64_t len) {
  using A = acc_t<T>;
  A m[kColumnChunk], sum[kColumnChunk], buf[kColumnChunk], e[kColumnChunk];
  int64_t idx[kColumnChunk];
  // Row r of the block in the compute type (widened for 16-bit floats).
  auto row = [&](int64_t r) -> const A* {
    if constexpr (std::is_same_v<A, T>) {
      return xs + r * inner;
    } else {
      widen(xs + r * inner, buf, len);
      return buf;
    }
  };
  // Stores v[0..len) as row r of the output block.
  auto store = [&](int64_t r, const A* v) {
    if constexpr (std::is_same_v<A, T>)
      std::copy(v, v + len, ys + r * inner);
    else
      narrow(v, ys + r * inner, len);
  };
  const A* r0 = row(0);
  for (int64_t j = 0; j < len; ++j) m[j] = r0[j], sum[j] = A(0), idx[j] = 0;
  for (int64_t r = 1; r < n; ++r) {
    const A* v = row(r);
    for (int64_t j = 0; j < len; ++j)
      if (v[j] > m[j]) m[j] = v[j], idx[j] = r;
  }
  if (kind == SoftmaxKind::Hardmax) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < len; ++j) e[j] = A(idx[j] == r);
      store(r, e);
    }
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    exp_minus(row(r), m, true, e, len);
    for (int64_t j = 0; j < len; ++j) sum[j] += e[j];
  }
  if (kind == SoftmaxKind::Softmax) {
    for (int64_t j = 0; j < len; ++j) sum[j] = A(1) / sum[j];
    for (int64_t r = 0; r < n; ++r) {
      exp_minus(row(r), m, true, e, len);
      for (int64_t j = 0; j < len; ++j) e[j] *= sum[j];
      store(r, e);
    }
  } else {
    for (int64_t j = 0; j < len; ++j) sum[j] = m[j] + std::log(sum[j]);
    for (int64_t r = 0; r < n; ++r) {
      const A* v = row(r);
      for (int64_t j = 0; j < len; ++j) e[j] = v[j] - sum[j];
      store(r, e);
    }
  }
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
                       widen(x + o * n, buf.data(), n);
                       row_kernel<A>(kind_, buf.data(), buf.data(), n);
                       narrow(buf.data(), y + o * n, n);
                     }
                   }
                 });
  }

  // Axis not innermost (opset >= 13): process a chunk of contiguous columns at a time.
  template <typename T>
  void columns(const T* x, T* y, const AxisSplit& s, int threads) const {
    const int64_t n = s.axis, inner = s.inner;
    const int64_t chunks = (inner + kColumnChunk - 1) / kColumnChunk;
    parallel_for(s.outer * chunks, threads,
                 std::max<int64_t>(1, kReduceGrain / (n * std::min(inner, kColumnChunk))),
                 [&](int64_t b, int64_t e) {
                   for (int64_t t = b; t < e; ++t) {
                     const int64_t k1 = t / chunks, j0 = (t % chunks) * kColumnChunk;
                     const int64_t off = k1 * n * inner + j0;
                     column_chunk<T>(kind_, x + off, y + off, n, inner,
                                     std::min(kColumnChunk, inner - j0));
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
           [kind = kind](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<SoftmaxKernel>(info, kind);
           }});
  }
}

}  // namespace onyx::cpu
