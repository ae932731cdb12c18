// Linear quantization: QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked
// scales; int2..int16, uint2..uint16, float8 and float4 encodings), DynamicQuantizeLinear,
// and the integer products MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
// Rounding follows the ONNX reference: round half to even, then saturate.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "graph/float8.h"
#include "graph/saturate_cast.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/int8_conv.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/move_util.h"
#include "kernels/cpu/window.h"

namespace onyx::cpu {
namespace {

// Integer range of a quantized integer type; false for float encodings.
bool int_range(DataType t, double* lo, double* hi) {
  switch (t) {
    case DataType::UInt8:
      *lo = 0, *hi = 255;
      return true;
    case DataType::Int8:
      *lo = -128, *hi = 127;
      return true;
    case DataType::UInt16:
      *lo = 0, *hi = 65535;
      return true;
    case DataType::Int16:
      *lo = -32768, *hi = 32767;
      return true;
    case DataType::UInt4:
      *lo = 0, *hi = 15;
      return true;
    case DataType::Int4:
      *lo = -8, *hi = 7;
      return true;
    case DataType::UInt2:
      *lo = 0, *hi = 3;
      return true;
    case DataType::Int2:
      *lo = -2, *hi = 1;
      return true;
    case DataType::Int32:
      *lo = -2147483648.0, *hi = 2147483647.0;
      return true;
    default:
      return false;
  }
}

bool is_float8_like(DataType t) { return is_float8(t); }

// A zero point matches its scale's shape; single values may differ in rank ([] vs [1]).
bool same_layout(const Tensor& zp, const Tensor& scale) {
  return zp.shape() == scale.shape() || (zp.numel() == 1 && scale.numel() == 1);
}

// Elements as double, including the float8/float4 encodings.
std::vector<double> values_of(const Tensor& t) {
  if (!is_float8_like(t.dtype())) return t.to_double_vector();
  std::vector<double> v(t.numel());
  const uint8_t* p = t.data_as<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = float8_to_float(p[i], t.dtype());
  return v;
}

// Stores a rounded, clamped integer `v` into element i of a quantized integer tensor.
void store_int(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DataType::UInt8:
    case DataType::UInt4:
    case DataType::UInt2:
      t.data_as<uint8_t>()[i] = uint8_t(v);
      break;
    case DataType::Int8:
    case DataType::Int4:
    case DataType::Int2:
      t.data_as<int8_t>()[i] = int8_t(v);
      break;
    case DataType::UInt16:
      t.data_as<uint16_t>()[i] = uint16_t(v);
      break;
    case DataType::Int16:
      t.data_as<int16_t>()[i] = int16_t(v);
      break;
    case DataType::Int32:
      t.data_as<int32_t>()[i] = int32_t(v);
      break;
    default:
      break;
  }
}

// Round half to even and clamp into [lo, hi]; NaN goes to lo (numpy's int cast gives INT_MIN).
double round_clamp(double v, double lo, double hi) {
  if (std::isnan(v)) return lo;
  return std::clamp(std::nearbyint(v), lo, hi);
}

/// How a scale / zero-point tensor maps onto x seen as [outer, D, inner] around `axis`:
/// element (o, d, i) uses index o * so + (d / block) * sd + i * si.
struct ParamLayout {
  int64_t outer = 1, D = 1, inner = 1, block = 1, so = 0, sd = 0, si = 0;
  int64_t index(int64_t flat) const {
    const int64_t i = flat % inner, d = (flat / inner) % D, o = flat / (inner * D);
    return o * so + (d / block) * sd + i * si;
  }
};

ParamLayout param_layout(const std::string& who, const Shape& x, const Tensor& s, int64_t axis,
                         int64_t block) {
  ParamLayout p;
  if (s.numel() == 1 && s.rank() <= 1) return p;
  const int64_t r = static_cast<int64_t>(x.size());
  const int64_t a = normalize_axis(axis, r, who);
  p.outer = dims_product(x, 0, a);
  p.D = x[a];
  p.inner = dims_product(x, a + 1, x.size());
  if (block <= 0) {
    ONYX_CHECK(s.rank() == 1 && s.dim(0) == p.D,
               "[{}] per-axis scale should have shape [{}] (axis {} of {}) but has {}", who, p.D, a,
               shape_str(x), shape_str(s.shape()));
    p.sd = 1;
    return p;
  }
  Shape want = x;
  want[a] = (x[a] + block - 1) / block;
  ONYX_CHECK(s.shape() == want,
             "[{}] blocked scale should have shape {} (block_size {}) but has {}", who,
             shape_str(want), block, shape_str(s.shape()));
  p.block = block;
  p.si = 1;
  p.sd = p.inner;
  p.so = want[a] * p.inner;
  return p;
}

/// q[i] = clamp(round_half_even(x[i] / scale) + zp, lo, hi) for 8-bit Q, NaN -> lo: the
/// general path's result (round_clamp) for float x and a float scale, written so that the loop
/// vectorises (QDQ models quantize every activation twice per layer).
template <typename Q>
void quantize_8bit(const float* __restrict x, Q* __restrict q, int64_t n, float scale, float zp,
                   float lo, float hi) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] / scale) + zp;
    q[i] = static_cast<Q>(v > lo ? (v < hi ? v : hi) : lo);
  }
}

/// y[i] = (q[i] - zp) * scale in float for 8-bit Q: the general path's double product rounded
/// to float is the same value (an 9-bit integer times a float scale is exact in double).
template <typename Q>
void dequantize_8bit(const Q* __restrict q, float* __restrict y, int64_t n, float scale, int zp) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(int(q[i]) - zp) * scale;
}

class QuantizeLinearKernel final : public Kernel {
 public:
  explicit QuantizeLinearKernel(const KernelInfo& info) {
    const Node& n = info.node;
    axis_ = n.attr_int("axis", 1);
    saturate_ = n.attr_int("saturate", 1) != 0;
    block_ = n.attr_int("block_size", 0);
    output_dtype_ = static_cast<DataType>(n.attr_int("output_dtype", 0));
    precision_ = static_cast<DataType>(n.attr_int("precision", 0));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& scale = ctx.required_input(1);
    const Tensor* zp = ctx.input(2);
    DataType out = zp                                     ? zp->dtype()
                   : output_dtype_ != DataType::Undefined ? output_dtype_
                                                          : DataType::UInt8;
    ONYX_CHECK(!zp || output_dtype_ == DataType::Undefined || output_dtype_ == zp->dtype(),
               "[{}] output_dtype {} does not match y_zero_point dtype {}", ctx.label(),
               dtype_name(output_dtype_), dtype_name(zp ? zp->dtype() : out));
    ONYX_CHECK(!zp || same_layout(*zp, scale),
               "[{}] y_zero_point shape {} should match y_scale shape {}", ctx.label(),
               shape_str(zp ? zp->shape() : Shape{}), shape_str(scale.shape()));
    double lo = 0, hi = 0;
    const bool integer = int_range(out, &lo, &hi) && out != DataType::Int32;
    ONYX_CHECK(integer || is_float8(out), "[{}] cannot quantize to {}", ctx.label(),
               dtype_name(out));
    const ParamLayout lay = param_layout(ctx.label(), x.shape(), scale, axis_, block_);
    const std::vector<double> s = values_of(scale);
    const std::vector<double> z = zp ? values_of(*zp) : std::vector<double>(s.size(), 0.0);
    Tensor& y = ctx.allocate_output(0, out, x.shape());
    if (x.dtype() == DataType::Float && scale.dtype() == DataType::Float && s.size() == 1 &&
        (out == DataType::UInt8 || out == DataType::Int8) &&
        (precision_ == DataType::Undefined || precision_ == DataType::Float)) {
      const float sc = float(s[0]), z0 = float(z[0]), flo = float(lo), fhi = float(hi);
      const float* xv = x.data<float>();
      parallel_for(x.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
        if (out == DataType::UInt8)
          quantize_8bit(xv + b, y.data<uint8_t>() + b, e - b, sc, z0, flo, fhi);
        else
          quantize_8bit(xv + b, y.data<int8_t>() + b, e - b, sc, z0, flo, fhi);
      });
      return;
    }
    // x / scale is computed in `precision` (default: x's type; double for int32 x).
    const DataType prec = precision_ != DataType::Undefined ? precision_
                          : x.dtype() == DataType::Int32    ? DataType::Double
                                                            : x.dtype();
    using XTypes = TypeList<float, double, float16, bfloat16, int32_t>;
    dispatch<XTypes>(x.dtype(), ctx.label(), [&]<typename X>() {
      const X* xv = x.data<X>();
      dispatch<FloatTypes>(prec, ctx.label(), [&]<typename P>() {
        using A = acc_t<P>;
        // x and scale are rounded to P first, as numpy's astype(precision) does.
        parallel_for(x.numel(), ctx.threads(), kCostlyGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t k = lay.index(i);
            const A q = A(P(A(P(A(acc_t<X>(xv[i])))) / A(P(A(s[k])))));
            if (integer) {
              store_int(y, i, round_clamp(std::nearbyint(double(q)) + z[k], lo, hi));
            } else if (out == DataType::Float4E2M1) {
              y.data_as<uint8_t>()[i] = float_to_float8(float(double(q) + z[k]), out, true);
            } else {
              y.data_as<uint8_t>()[i] = float_to_float8(float(q), out, saturate_);
            }
          }
        });
      });
    });
  }

 private:
  int64_t axis_ = 1;
  bool saturate_ = true;
  int64_t block_ = 0;
  DataType output_dtype_ = DataType::Undefined;
  DataType precision_ = DataType::Undefined;
};

class DequantizeLinearKernel final : public Kernel {
 public:
  explicit DequantizeLinearKernel(const KernelInfo& info) {
    axis_ = info.node.attr_int("axis", 1);
    block_ = info.node.attr_int("block_size", 0);
    output_dtype_ = static_cast<DataType>(info.node.attr_int("output_dtype", 0));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& scale = ctx.required_input(1);
    const Tensor* zp = ctx.input(2);
    const bool f8 = is_float8(x.dtype());
    ONYX_CHECK(!zp || zp->dtype() == x.dtype(),
               "[{}] x_zero_point dtype {} should match x dtype {}", ctx.label(),
               dtype_name(zp ? zp->dtype() : x.dtype()), dtype_name(x.dtype()));
    ONYX_CHECK(!zp || same_layout(*zp, scale),
               "[{}] x_zero_point shape {} should match x_scale shape {}", ctx.label(),
               shape_str(zp ? zp->shape() : Shape{}), shape_str(scale.shape()));
    ONYX_CHECK(is_float(scale.dtype()), "[{}] x_scale should be a float tensor but is {}",
               ctx.label(), dtype_name(scale.dtype()));
    const DataType out = output_dtype_ != DataType::Undefined ? output_dtype_ : scale.dtype();
    const ParamLayout lay = param_layout(ctx.label(), x.shape(), scale, axis_, block_);
    const std::vector<double> s = values_of(scale);
    std::vector<double> z(s.size(), 0.0);
    if (zp && !f8) z = values_of(*zp);
    if (zp && f8 && x.dtype() != DataType::Float4E2M1)
      for (double v : values_of(*zp))
        ONYX_CHECK(v == 0, "[{}] x_zero_point should be zero for {} but is {}", ctx.label(),
                   dtype_name(x.dtype()), v);
    // The reference computes in float32 (float64 for int32 x).
    const bool wide = x.dtype() == DataType::Int32;
    Tensor& y = ctx.allocate_output(0, out, x.shape());
    if ((x.dtype() == DataType::UInt8 || x.dtype() == DataType::Int8) && out == DataType::Float &&
        scale.dtype() == DataType::Float && s.size() == 1) {
      const float sc = float(s[0]);
      const int z0 = int(z[0]);
      float* dst = y.data<float>();
      parallel_for(x.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
        if (x.dtype() == DataType::UInt8)
          dequantize_8bit(x.data<uint8_t>() + b, dst + b, e - b, sc, z0);
        else
          dequantize_8bit(x.data<int8_t>() + b, dst + b, e - b, sc, z0);
      });
      return;
    }
    dispatch<FloatTypes>(out, ctx.label(), [&]<typename T>() {
      T* dst = y.data<T>();
      auto run = [&](auto load) {
        parallel_for(x.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t k = lay.index(i);
            double v = (load(i) - z[k]) * s[k];
            if (!wide) v = float(v);
            dst[i] = T(acc_t<T>(v));
          }
        });
      };
      if (dtype_size(x.dtype()) == 1) {  // every byte pattern decoded once
        double lut[256];
        for (int v = 0; v < 256; ++v)
          lut[v] = f8                         ? float8_to_float(uint8_t(v), x.dtype())
                   : is_signed_int(x.dtype()) ? double(int8_t(v))
                                              : double(v);
        const uint8_t* p = x.data_as<uint8_t>();
        run([&](int64_t i) { return lut[p[i]]; });
      } else {
        dispatch<TypeList<int16_t, uint16_t, int32_t>>(x.dtype(), ctx.label(), [&]<typename X>() {
          const X* p = x.data<X>();
          run([&](int64_t i) { return double(p[i]); });
        });
      }
    });
  }

 private:
  int64_t axis_ = 1;
  int64_t block_ = 0;
  DataType output_dtype_ = DataType::Undefined;
};

/// Minimum and maximum of x[0, n), starting from mn and mx; a NaN is skipped (`v < lo ? v : lo`
/// is the vector min instruction's own rule, so the loop vectorises with that meaning).
void min_max(const float* __restrict x, int64_t n, float& mn, float& mx) {
  float lo = mn, hi = mx;
#pragma omp simd reduction(min : lo) reduction(max : hi)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  mn = lo, mx = hi;
}

// y = saturate(round(x / scale) + zp) to uint8, with scale and zp from x's range
// (which always includes 0). onnxruntime.quantization.quantize_dynamic puts one before every
// integer product, so both passes run vectorised on the session's threads.
void dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  ONYX_CHECK(x.dtype() == DataType::Float, "[{}] x should be float but is {}", ctx.label(),
             dtype_name(x.dtype()));
  const float* p = x.data<float>();
  const int64_t n = x.numel();
  // Per-chunk ranges, combined in chunk order (min and max do not depend on it anyway).
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> lo(static_cast<size_t>(chunks), 0.0f), hi(static_cast<size_t>(chunks), 0.0f);
  parallel_for(chunks, ctx.threads(), 2, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      min_max(p + c * kChunk, std::min(kChunk, n - c * kChunk), lo[c], hi[c]);
  });
  float mx = 0, mn = 0;
  for (int64_t c = 0; c < chunks; ++c) mn = std::min(mn, lo[c]), mx = std::max(mx, hi[c]);
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - mn / scale, 0.0f, 255.0f));
  Tensor& y = ctx.allocate_output(0, DataType::UInt8, x.shape());
  uint8_t* q = y.data<uint8_t>();
  if (std::isfinite(scale)) {
    parallel_for(n, ctx.threads(), kCheapGrain,
                 [&](int64_t b, int64_t e) { quantize_8bit(p + b, q + b, e - b, scale, zp, 0.0f, 255.0f); });
  } else {
    parallel_for(n, ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        q[i] = saturate_cast<uint8_t>(std::nearbyint(p[i] / scale) + zp);
    });
  }
  ctx.allocate_output(1, DataType::Float, {}).data<float>()[0] = scale;
  // An infinite x makes the scale infinite and these NaN: saturate_cast reads NaN as 0 where
  // a plain cast is undefined.
  ctx.allocate_output(2, DataType::UInt8, {}).data<uint8_t>()[0] = saturate_cast<uint8_t>(zp);
}

// ---- integer matrix products -----------------------------------------------------------

/// Batched int32 matmul with numpy broadcasting of batch dims: C = (A - a_zp) @ (B - b_zp).
/// a_zp is per-tensor or per-row (length M); b_zp per-tensor or per-column (length N).
struct IntMatmul {
  Shape out_shape;
  int64_t M = 0, K = 0, N = 0;
  std::vector<int32_t> c;
};

/// The elements of an 8-bit integer tensor (any integer tensor) as int32.
std::vector<int32_t> int32_values(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::UInt8) {
    std::copy_n(t.data<uint8_t>(), t.numel(), v.begin());
  } else if (t.dtype() == DataType::Int8) {
    std::copy_n(t.data<int8_t>(), t.numel(), v.begin());
  } else {
    const std::vector<int64_t> w = t.to_int64_vector();
    for (size_t i = 0; i < w.size(); ++i) v[i] = int32_t(w[i]);
  }
  return v;
}

IntMatmul int_matmul(KernelContext& ctx, const Tensor& a, const Tensor* azp, const Tensor& b,
                     const Tensor* bzp) {
  ONYX_CHECK(a.rank() >= 1 && b.rank() >= 1, "[{}] inputs should have rank >= 1 but are {} and {}",
             ctx.label(), shape_str(a.shape()), shape_str(b.shape()));
  Shape as = a.shape(), bs = b.shape();
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  IntMatmul r;
  r.M = as[as.size() - 2];
  r.K = as.back();
  r.N = bs.back();
  ONYX_CHECK(bs[bs.size() - 2] == r.K, "[{}] inner dimensions differ: A {} and B {}", ctx.label(),
             shape_str(a.shape()), shape_str(b.shape()));
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t da = i + ab.size() >= nb ? ab[i + ab.size() - nb] : 1;
    const int64_t db = i + bb.size() >= nb ? bb[i + bb.size() - nb] : 1;
    ONYX_CHECK(da == db || da == 1 || db == 1, "[{}] batch dimensions of A {} and B {} differ",
               ctx.label(), shape_str(a.shape()), shape_str(b.shape()));
    batch[i] = std::max(da, db);
  }
  const std::vector<int32_t> av = int32_values(a), bv = int32_values(b);
  auto zps = [&](const Tensor* z, int64_t n, const char* what) {
    std::vector<int32_t> v(n, 0);
    if (!z) return v;
    const std::vector<double> d = z->to_double_vector();
    ONYX_CHECK(d.size() == 1 || int64_t(d.size()) == n,
               "[{}] {} should have 1 or {} values but has {}", ctx.label(), what, n, d.size());
    for (int64_t i = 0; i < n; ++i) v[i] = int32_t(d.size() == 1 ? d[0] : d[i]);
    return v;
  };
  const std::vector<int32_t> za = zps(azp, r.M, "a_zero_point"), zb = zps(bzp, r.N, "b_zero_point");
  const int64_t nbatch = shape_numel(batch);
  r.c.assign(nbatch * r.M * r.N, 0);
  const std::vector<int64_t> sa = contiguous_strides(ab), sb = contiguous_strides(bb);
  parallel_for(nbatch * r.M, ctx.threads(), 16, [&](int64_t beg, int64_t end) {
    std::vector<int32_t> row(r.K);
    for (int64_t bm = beg; bm < end; ++bm) {
      const int64_t bi = bm / r.M, m = bm % r.M;
      int64_t oa = 0, ob = 0, rem = bi;
      for (size_t d = nb; d-- > 0;) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        if (d + ab.size() >= nb && ab[d + ab.size() - nb] > 1) oa += idx * sa[d + ab.size() - nb];
        if (d + bb.size() >= nb && bb[d + bb.size() - nb] > 1) ob += idx * sb[d + bb.size() - nb];
      }
      const int32_t* pa = av.data() + (oa * r.M + m) * r.K;
      const int32_t* pb = bv.data() + ob * r.K * r.N;
      for (int64_t k = 0; k < r.K; ++k) row[k] = pa[k] - za[m];
      int32_t* pc = r.c.data() + bm * r.N;
      for (int64_t k = 0; k < r.K; ++k) {
        const uint32_t ak = uint32_t(row[k]);
        const int32_t* pbk = pb + k * r.N;
        // int32 accumulation wraps around (as ONNX Runtime's does) instead of overflowing:
        // unsigned arithmetic, which also lets the loop vectorise.
        for (int64_t n = 0; n < r.N; ++n)
          pc[n] = int32_t(uint32_t(pc[n]) + ak * uint32_t(pbk[n] - zb[n]));
      }
    }
  });
  r.out_shape = batch;
  if (!a1) r.out_shape.push_back(r.M);
  if (!b1) r.out_shape.push_back(r.N);
  return r;
}

class MatMulIntegerKernel final : public Kernel {
 public:
  explicit MatMulIntegerKernel(const KernelInfo& info) : fast_(info.constant_input(1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.required_input(0);
    const Tensor& b = ctx.required_input(1);
    if (fast_.run(ctx, a, ctx.input(2), b, ctx.input(3))) return;
    IntMatmul r = int_matmul(ctx, a, ctx.input(2), b, ctx.input(3));
    Tensor& y = ctx.allocate_output(0, DataType::Int32, r.out_shape);
    std::copy(r.c.begin(), r.c.end(), y.data<int32_t>());
  }

 private:
  Int8MatMul fast_;  // oneDNN where it is exact (int8_matmul.h)
};

/// ai.onyx MatMulIntegerToFloat(A, B, a_zero_point, b_zero_point, scale[, bias]) =
/// float(MatMulInteger(A, B, a_zp, b_zp)) * scale (+ bias): onnxruntime's quantize_dynamic
/// writes each Linear as MatMulInteger -> Cast -> Mul by the scales' product -> Add of the
/// bias, and inference/fusions_qdq.cpp folds the last three into this epilogue, in their order
/// (so the results are the same bits). B is 2-D, scale one float, bias float [N].
class MatMulIntegerToFloatKernel final : public Kernel {
 public:
  explicit MatMulIntegerToFloatKernel(const KernelInfo& info) : fast_(info.constant_input(1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.required_input(0);
    const Tensor& b = ctx.required_input(1);
    const Tensor& scale = ctx.required_input(4);
    const Tensor* bias = ctx.input(5);
    ONYX_CHECK(b.rank() == 2 && a.rank() >= 2, "[{}] expects A of rank >= 2 and a 2-D B but got {} and {}",
               ctx.label(), shape_str(a.shape()), shape_str(b.shape()));
    ONYX_CHECK(scale.dtype() == DataType::Float && scale.numel() == 1,
               "[{}] scale should be one float but is {} {}", ctx.label(), dtype_name(scale.dtype()),
               shape_str(scale.shape()));
    const int64_t N = b.dim(1);
    ONYX_CHECK(!bias || (bias->dtype() == DataType::Float && bias->numel() == N),
               "[{}] bias should be float [{}] but is {} {}", ctx.label(), N,
               dtype_name(bias ? bias->dtype() : DataType::Float), shape_str(bias ? bias->shape() : Shape{}));
    Shape out = a.shape();
    out.back() = N;
    Tensor acc = ctx.scratch(DataType::Int32, out);
    const int32_t* c = nullptr;
    IntMatmul r;
    if (fast_.run(ctx, a, ctx.input(2), b, ctx.input(3), &acc)) {
      c = acc.data<int32_t>();
    } else {
      r = int_matmul(ctx, a, ctx.input(2), b, ctx.input(3));
      c = r.c.data();
    }
    Tensor& y = ctx.allocate_output(0, DataType::Float, out);
    float* yp = y.data<float>();
    const float s = *scale.data<float>();
    const float* bp = bias ? bias->data<float>() : nullptr;
    const int64_t rows = y.numel() / std::max<int64_t>(N, 1);
    parallel_for(rows, ctx.threads(), std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(N, 1)),
                 [&](int64_t r0, int64_t r1) {
                   // Two passes per row: one expression would be contracted into a fused
                   // multiply-add, whose single rounding differs from the graph's Mul then Add.
                   for (int64_t i = r0; i < r1; ++i) {
                     float* row = yp + i * N;
                     const int32_t* ci = c + i * N;
                     for (int64_t n = 0; n < N; ++n) row[n] = static_cast<float>(ci[n]) * s;
                     if (bp)
                       for (int64_t n = 0; n < N; ++n) row[n] += bp[n];
                   }
                 });
  }

 private:
  Int8MatMul fast_;
};

// Rounds a scale product in the scales' own type (float16 scales multiply in float16).
double scale_ratio(const Tensor& s1, double a, double b, double y) {
  double v = 0;
  dispatch<FloatTypes>(s1.dtype(), "scale", [&]<typename T>() {
    using A = acc_t<T>;
    v = double(A(T(A(T(A(a) * A(b))) / A(y))));
  });
  return v;
}

// Requantizes int32 accumulators: q = clamp(round(acc * ratio[m or n] + y_zp)).
void requantize(KernelContext& ctx, const std::vector<int32_t>& acc, Tensor& y,
                const std::vector<double>& ratio, int64_t inner, int64_t ch, double yzp) {
  double lo = 0, hi = 0;
  int_range(y.dtype(), &lo, &hi);
  parallel_for(int64_t(acc.size()), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const double rt = ratio.size() == 1 ? ratio[0] : ratio[(i / inner) % ch];
      store_int(y, i, round_clamp(double(acc[i]) * rt + yzp, lo, hi));
    }
  });
}

void qlinear_matmul(KernelContext& ctx) {
  const Tensor& a = ctx.required_input(0);
  const Tensor& as = ctx.required_input(1);
  const Tensor& b = ctx.required_input(3);
  const Tensor& bs = ctx.required_input(4);
  const Tensor& ys = ctx.required_input(6);
  const Tensor* yz = ctx.input(7);
  ONYX_CHECK(as.numel() == 1 && ys.numel() == 1,
             "[{}] a_scale and y_scale should be scalars but have shapes {} and {}", ctx.label(),
             shape_str(as.shape()), shape_str(ys.shape()));
  IntMatmul r = int_matmul(ctx, a, ctx.input(2), b, ctx.input(5));
  const DataType out = yz ? yz->dtype() : a.dtype();
  const std::vector<double> bsv = bs.to_double_vector();
  ONYX_CHECK(bsv.size() == 1 || int64_t(bsv.size()) == r.N,
             "[{}] b_scale should have 1 or {} values but has {}", ctx.label(), r.N, bsv.size());
  std::vector<double> ratio;
  for (double v : bsv)
    ratio.push_back(scale_ratio(as, as.to_double_vector()[0], v, ys.to_double_vector()[0]));
  Tensor& y = ctx.allocate_output(0, out, r.out_shape);
  requantize(ctx, r.c, y, ratio, 1, r.N, yz ? yz->to_double_vector()[0] : 0.0);
}

// ---- integer convolution ---------------------------------------------------------------

struct IntConvAttrs {
  std::string auto_pad;
  std::vector<int64_t> dilations, pads, strides, kernel_shape;
  int64_t group = 1;
  explicit IntConvAttrs(const Node& n)
      : auto_pad(n.attr_string("auto_pad", "NOTSET")),
        dilations(n.attr_ints("dilations")),
        pads(n.attr_ints("pads")),
        strides(n.attr_ints("strides")),
        kernel_shape(n.attr_ints("kernel_shape")),
        group(n.attr_int("group", 1)) {
    // Values checked once at creation (lengths need X's rank: conv_int32 checks them). 2^32
    // bounds keep the window arithmetic (in + pads, (k - 1) * dilation) inside int64.
    constexpr int64_t kMax = int64_t{1} << 32;
    check_attr_values(n.label(), "strides", strides, 1, kMax);
    check_attr_values(n.label(), "dilations", dilations, 1, kMax);
    check_attr_values(n.label(), "kernel_shape", kernel_shape, 1, kMax);
    check_attr_values(n.label(), "pads", pads, 0, kMax);
    ONYX_CHECK(group >= 1 && group <= kMax, "[{}] attribute 'group' holds {}, outside [1, {}]",
               n.label(), group, kMax);
  }
};

/// Direct N-D convolution of int32 data: y[n, m, ...] = sum x[n, c, ...] * w[m, c/g, ...]
/// (+ bias[m]); returns y and sets `out_shape`.
std::vector<int32_t> conv_int32(KernelContext& ctx, const IntConvAttrs& at, const Shape& xs,
                                const std::vector<int32_t>& x, const Shape& ws,
                                const std::vector<int32_t>& w, const std::vector<int32_t>* bias,
                                Shape* out_shape) {
  const int64_t r = static_cast<int64_t>(xs.size()) - 2;
  ONYX_CHECK(r >= 1 && ws.size() == xs.size(), "[{}] X {} and W {} should have the same rank >= 3",
             ctx.label(), shape_str(xs), shape_str(ws));
  const int64_t N = xs[0], C = xs[1], M = ws[0], G = at.group;
  ONYX_CHECK(G > 0 && C == ws[1] * G && M % G == 0, "[{}] W {} does not fit X {} with group {}",
             ctx.label(), shape_str(ws), shape_str(xs), G);
  std::vector<int64_t> k(ws.begin() + 2, ws.end());
  // strides, dilations and pads of the wrong length for X's rank are errors, not reads past
  // their ends (their values were checked in IntConvAttrs).
  WindowSteps steps(ctx.label(), at.strides, at.dilations, at.pads, static_cast<size_t>(r));
  ONYX_CHECK(at.kernel_shape.empty() || Shape(ws.begin() + 2, ws.end()) == at.kernel_shape,
             "[{}] attribute 'kernel_shape' holds [{}], not W's spatial dims {}", ctx.label(),
             fmt::join(at.kernel_shape, ", "), shape_str(ws));
  std::vector<int64_t> d = steps.dil, s = steps.stride, pb(r, 0), pe(r, 0), o(r);
  if (!at.pads.empty()) {
    for (int64_t i = 0; i < r; ++i) pb[i] = at.pads[i], pe[i] = at.pads[r + i];
  }
  for (int64_t i = 0; i < r; ++i) {
    const int64_t in = xs[2 + i], ke = (k[i] - 1) * d[i] + 1;
    if (at.auto_pad == "SAME_UPPER" || at.auto_pad == "SAME_LOWER") {
      o[i] = (in + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>(0, (o[i] - 1) * s[i] + ke - in);
      pb[i] = at.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe[i] = total - pb[i];
    } else if (at.auto_pad == "VALID") {
      pb[i] = pe[i] = 0;
      o[i] = (in - ke) / s[i] + 1;
    } else {
      o[i] = (in + pb[i] + pe[i] - ke) / s[i] + 1;
    }
    ONYX_CHECK(o[i] > 0, "[{}] output size along spatial axis {} is {} (X {}, W {})", ctx.label(),
               i, o[i], shape_str(xs), shape_str(ws));
  }
  *out_shape = {N, M};
  for (int64_t v : o) out_shape->push_back(v);
  const Shape ishape(xs.begin() + 2, xs.end()), oshape(o.begin(), o.end());
  const int64_t ip = shape_numel(ishape), op = shape_numel(oshape), kp = shape_numel(k);
  const int64_t cg = C / G, mg = M / G, rows = cg * kp;
  std::vector<int32_t> y(N * M * op, 0);
  const std::vector<int64_t> is = contiguous_strides(ishape);
  // im2col per (image, group), zeros where a tap falls in the padding, then a row-major
  // product whose inner loop runs over contiguous output positions.
  std::vector<int32_t> col(rows * op);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      parallel_for(rows, ctx.threads(), 4, [&](int64_t b, int64_t e) {
        std::vector<int64_t> kv(r);
        for (int64_t row = b; row < e; ++row) {
          const int64_t c = row / kp;
          int64_t krem = row % kp;
          for (int64_t i = r - 1; i >= 0; --i) kv[i] = krem % k[i], krem /= k[i];
          const int32_t* xc = x.data() + (n * C + g * cg + c) * ip;
          int32_t* dst = col.data() + row * op;
          for (int64_t p = 0; p < op; ++p) {
            int64_t rem = p, off = 0;
            bool inside = true;
            for (int64_t i = r - 1; i >= 0; --i) {
              const int64_t pos = (rem % o[i]) * s[i] - pb[i] + kv[i] * d[i];
              rem /= o[i];
              inside = inside && pos >= 0 && pos < ishape[i];
              off += pos * is[i];
            }
            dst[p] = inside ? xc[off] : 0;
          }
        }
      });
      parallel_for(mg, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        for (int64_t mm = b; mm < e; ++mm) {
          const int64_t m = g * mg + mm;
          int32_t* py = y.data() + (n * M + m) * op;
          std::fill(py, py + op, bias ? (*bias)[m] : 0);
          for (int64_t row = 0; row < rows; ++row) {
            const int32_t wv = w[m * rows + row];
            if (wv == 0) continue;
            const int32_t* cr = col.data() + row * op;
            // Wraps around like MatMulInteger's (a bias of INT32_MAX plus anything overflowed).
            for (int64_t p = 0; p < op; ++p) py[p] = int32_t(uint32_t(py[p]) + uint32_t(wv * cr[p]));
          }
        }
      });
    }
  }
  return y;
}

// x - zp as int32, zp per-tensor or per-channel along axis 1 (x) / axis 0 (w).
std::vector<int32_t> shifted(KernelContext& ctx, const Tensor& t, const Tensor* zp, int64_t axis,
                             const char* what) {
  const std::vector<double> v = t.to_double_vector();
  std::vector<int32_t> out(v.size());
  std::vector<double> z = zp ? zp->to_double_vector() : std::vector<double>{0.0};
  const int64_t ch = t.dim(axis), inner = dims_product(t.shape(), axis + 1, t.shape().size());
  ONYX_CHECK(z.size() == 1 || int64_t(z.size()) == ch,
             "[{}] {} should have 1 or {} values but has {}", ctx.label(), what, ch, z.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = int32_t(v[i]) - int32_t(z.size() == 1 ? z[0] : z[(int64_t(i) / inner) % ch]);
  return out;
}

class ConvIntegerKernel final : public Kernel {
 public:
  explicit ConvIntegerKernel(const KernelInfo& info) : at_(info.node) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& w = ctx.required_input(1);
    ONYX_CHECK(x.rank() >= 3, "[{}] X should have rank >= 3 but has shape {}", ctx.label(),
               shape_str(x.shape()));
    Shape os;
    std::vector<int32_t> y =
        conv_int32(ctx, at_, x.shape(), shifted(ctx, x, ctx.input(2), 0, "x_zero_point"), w.shape(),
                   shifted(ctx, w, ctx.input(3), 0, "w_zero_point"), nullptr, &os);
    std::copy(y.begin(), y.end(), ctx.allocate_output(0, DataType::Int32, os).data<int32_t>());
  }

 private:
  IntConvAttrs at_;
};

class QLinearConvKernel final : public Kernel {
 public:
  explicit QLinearConvKernel(const KernelInfo& info)
      : at_(info.node), fast_(info.node, info.constant_input(3)) {}
  void compute(KernelContext& ctx) const override {
    if (fast_.run(ctx)) return;
    const Tensor& x = ctx.required_input(0);
    const Tensor& xs = ctx.required_input(1);
    const Tensor& w = ctx.required_input(3);
    const Tensor& ws = ctx.required_input(4);
    const Tensor& ys = ctx.required_input(6);
    const Tensor* yz = ctx.input(7);
    const Tensor* bias = ctx.input(8);
    ONYX_CHECK(x.rank() >= 3, "[{}] x should have rank >= 3 but has shape {}", ctx.label(),
               shape_str(x.shape()));
    std::vector<int32_t> bv;
    if (bias) {
      ONYX_CHECK(bias->dtype() == DataType::Int32 && bias->numel() == w.dim(0),
                 "[{}] B should be int32 of shape [{}] but is {}{}", ctx.label(), w.dim(0),
                 dtype_name(bias->dtype()), shape_str(bias->shape()));
      bv.assign(bias->data<int32_t>(), bias->data<int32_t>() + bias->numel());
    }
    Shape os;
    std::vector<int32_t> acc =
        conv_int32(ctx, at_, x.shape(), shifted(ctx, x, ctx.input(2), 0, "x_zero_point"), w.shape(),
                   shifted(ctx, w, ctx.input(5), 0, "w_zero_point"), bias ? &bv : nullptr, &os);
    const std::vector<double> wsv = ws.to_double_vector();
    ONYX_CHECK(wsv.size() == 1 || int64_t(wsv.size()) == w.dim(0),
               "[{}] w_scale should have 1 or {} values but has {}", ctx.label(), w.dim(0),
               wsv.size());
    std::vector<double> ratio;
    for (double v : wsv)
      ratio.push_back(scale_ratio(xs, xs.to_double_vector()[0], v, ys.to_double_vector()[0]));
    Tensor& y = ctx.allocate_output(0, yz ? yz->dtype() : x.dtype(), os);
    requantize(ctx, acc, y, ratio, shape_numel(Shape(os.begin() + 2, os.end())), os[1],
               yz ? yz->to_double_vector()[0] : 0.0);
  }

 private:
  IntConvAttrs at_;
  Int8Conv fast_;  // oneDNN where it is exact (int8_conv.h)
};

}  // namespace

void register_quantize_kernels(KernelRegistry& r) {
  const std::vector<DataType> quant_in{
      DataType::Int8,           DataType::UInt8,          DataType::Int16,
      DataType::UInt16,         DataType::Int32,          DataType::Int4,
      DataType::UInt4,          DataType::Int2,           DataType::UInt2,
      DataType::Float8E4M3FN,   DataType::Float8E4M3FNUZ, DataType::Float8E5M2,
      DataType::Float8E5M2FNUZ, DataType::Float4E2M1};
  const std::vector<DataType> u8s8{DataType::UInt8, DataType::Int8};
  r.add({"QuantizeLinear", "", 10, INT_MAX, "cpu", 0,
         float_types() + std::vector<DataType>{DataType::Int32},
         make_factory<QuantizeLinearKernel>()});
  r.add({"DequantizeLinear", "", 10, INT_MAX, "cpu", 0, quant_in,
         make_factory<DequantizeLinearKernel>()});
  r.add({"DynamicQuantizeLinear",
         "",
         11,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float},
         function_factory(dynamic_quantize_linear)});
  r.add({"MatMulInteger", "", 10, INT_MAX, "cpu", 0, u8s8, make_factory<MatMulIntegerKernel>()});
  r.add({"MatMulIntegerToFloat", "ai.onyx", 1, INT_MAX, "cpu", 0, u8s8,
         make_factory<MatMulIntegerToFloatKernel>()});
  r.add({"QLinearMatMul", "", 10, INT_MAX, "cpu", 0, u8s8, function_factory(qlinear_matmul)});
  r.add({"ConvInteger", "", 10, INT_MAX, "cpu", 0, u8s8, make_factory<ConvIntegerKernel>()});
  r.add({"QLinearConv", "", 10, INT_MAX, "cpu", 0, u8s8, make_factory<QLinearConvKernel>()});
}

}  // namespace onyx::cpu
