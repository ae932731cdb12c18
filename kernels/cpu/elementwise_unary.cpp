// Unary elementwise kernels: activations, math functions, rounding, predicates, Clip and
// PRelu. Each op is a small functor computing one element in acc_t<T> (float for the
// 16-bit floats), parsed from the node's attributes once.
#if defined(__GNUC__) && !defined(__clang__)
// Lets GCC if-convert the selects in these loops so they vectorise (FP traps are unused).
#pragma GCC optimize("no-trapping-math")
#endif
#include <cmath>
#include <limits>

#include "graph/float8.h"
#include "graph/saturate_cast.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/elementwise_checks.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/vmath.h"
#include "kernels/cpu/wrap_int.h"

namespace onyx::cpu {
namespace {

using FloatSigned = TypeList<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t>;

// Negation that wraps for the most negative integer (as numpy does) instead of overflowing.
template <typename C>
C wrap_neg(C x) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>)
    return static_cast<C>(-static_cast<std::make_unsigned_t<C>>(x));
  else
    return -x;
}

// Applies a floating function to integers through double (Erf on int tensors), saturating back.
template <typename C, typename F>
C via_float(C x, F f) {
  if constexpr (std::is_integral_v<C>)
    return saturate_cast<C>(f(static_cast<double>(x)));
  else
    return f(x);
}

float attr_f(const KernelInfo& i, const char* n, float def) { return i.node.attr_float(n, def); }

// ---- activations -------------------------------------------------------------------------
struct Relu {
  template <typename C>
  C operator()(C x) const {
    return x > C(0) ? x : C(0);
  }
};
struct LeakyRelu {
  float alpha;
  explicit LeakyRelu(const KernelInfo& i) : alpha(attr_f(i, "alpha", 0.01f)) {}
  template <typename C>
  C operator()(C x) const {
    return x >= C(0) ? x : C(alpha) * x;
  }
};
struct Elu {
  float alpha;
  explicit Elu(const KernelInfo& i) : alpha(attr_f(i, "alpha", 1.0f)) {}
  template <typename C>
  C operator()(C x) const {
    return x >= C(0) ? x : C(alpha) * (vexp(x) - C(1));
  }
};
struct Selu {
  float alpha, gamma;
  explicit Selu(const KernelInfo& i)
      : alpha(attr_f(i, "alpha", 1.67326319217681884765625f)),
        gamma(attr_f(i, "gamma", 1.05070102214813232421875f)) {}
  template <typename C>
  C operator()(C x) const {
    return C(gamma) * (x > C(0) ? x : C(alpha) * vexp(x) - C(alpha));
  }
};
struct Celu {
  float alpha;
  explicit Celu(const KernelInfo& i) : alpha(attr_f(i, "alpha", 1.0f)) {}
  template <typename C>
  C operator()(C x) const {
    return std::max(C(0), x) + std::min(C(0), C(alpha) * (vexp(x / C(alpha)) - C(1)));
  }
};
struct GeluErf {  // x/2 (1 + erf(x / sqrt 2))
  static constexpr UnaryF32 kSimd = UnaryF32::GeluErf;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    return C(0.5) * x * (C(1) + verf(x * C(0.7071067811865476)));
  }
};
struct GeluTanh {  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  static constexpr UnaryF32 kSimd = UnaryF32::GeluTanh;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    const C k = C(0.7978845608028654);
    return C(0.5) * x * (C(1) + vtanh(k * (x + C(0.044715) * x * x * x)));
  }
};
struct Sigmoid {
  static constexpr UnaryF32 kSimd = UnaryF32::Sigmoid;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    return C(1) / (C(1) + vexp(-x));
  }
};
struct HardSigmoid {
  float alpha, beta;
  explicit HardSigmoid(const KernelInfo& i)
      : alpha(attr_f(i, "alpha", 0.2f)), beta(attr_f(i, "beta", 0.5f)) {}
  template <typename C>
  C operator()(C x) const {
    return std::max(C(0), std::min(C(1), C(alpha) * x + C(beta)));
  }
};
struct HardSwish {
  template <typename C>
  C operator()(C x) const {
    return x * std::max(C(0), std::min(C(1), x / C(6) + C(0.5)));
  }
};
struct Tanh {
  static constexpr UnaryF32 kSimd = UnaryF32::Tanh;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    return vtanh(x);
  }
};
struct Softplus {  // log(1 + e^x) without overflow for large x
  template <typename C>
  C operator()(C x) const {
    return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
};
struct Softsign {
  template <typename C>
  C operator()(C x) const {
    return x / (C(1) + std::abs(x));
  }
};
struct Mish {
  template <typename C>
  C operator()(C x) const {
    return x * vtanh(Softplus{}(x));
  }
};
struct ThresholdedRelu {
  float alpha;
  explicit ThresholdedRelu(const KernelInfo& i) : alpha(attr_f(i, "alpha", 1.0f)) {}
  template <typename C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};
struct Shrink {  // integers compare and shift in double, then saturate back (a bias of 1e28
                 // on uint16 was an undefined cast; found by the model fuzz target)
  double bias, lambd;
  explicit Shrink(const KernelInfo& i)
      : bias(attr_f(i, "bias", 0)), lambd(attr_f(i, "lambd", 0.5f)) {}
  template <typename C>
  C operator()(C x) const {
    double v = static_cast<double>(x);
    return v < -lambd ? back<C>(v + bias) : v > lambd ? back<C>(v - bias) : C(0);
  }
  template <typename C>
  static C back(double v) {
    if constexpr (std::is_integral_v<C>)
      return saturate_cast<C>(v);
    else
      return C(v);
  }
};

// ---- math ------------------------------------------------------------------------------
struct Erf {
  static constexpr UnaryF32 kSimd = UnaryF32::Erf;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    return via_float(x, [](auto v) { return verf(v); });
  }
};
struct Exp {
  static constexpr UnaryF32 kSimd = UnaryF32::Exp;  // float32: simd().unary
  template <typename C>
  C operator()(C x) const {
    return vexp(x);
  }
};
struct Log {
  template <typename C>
  C operator()(C x) const {
    return std::log(x);
  }
};
struct Sqrt {
  template <typename C>
  C operator()(C x) const {
    return std::sqrt(x);
  }
};
struct Reciprocal {
  template <typename C>
  C operator()(C x) const {
    return C(1) / x;
  }
};
struct Abs {
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? wrap_neg(x) : x;
  }
};
struct Neg {
  template <typename C>
  C operator()(C x) const {
    return wrap_neg(x);
  }
};
struct Floor {
  template <typename C>
  C operator()(C x) const {
    return std::floor(x);
  }
};
struct Ceil {
  template <typename C>
  C operator()(C x) const {
    return std::ceil(x);
  }
};
struct Round {  // half to even under the default rounding mode
  template <typename C>
  C operator()(C x) const {
    return std::nearbyint(x);
  }
};
struct Sign {
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>)
      if (x != x) return x;
    return C((C(0) < x) - (x < C(0)));
  }
};
struct BitwiseNot {
  template <typename C>
  C operator()(C x) const {
    return static_cast<C>(~x);
  }
};
struct Not {
  bool operator()(bool x) const { return !x; }
};

struct Sin {
  template <typename C>
  C operator()(C x) const {
    return std::sin(x);
  }
};
struct Cos {
  template <typename C>
  C operator()(C x) const {
    return std::cos(x);
  }
};
struct Tan {
  template <typename C>
  C operator()(C x) const {
    return std::tan(x);
  }
};
struct Asin {
  template <typename C>
  C operator()(C x) const {
    return std::asin(x);
  }
};
struct Acos {
  template <typename C>
  C operator()(C x) const {
    return std::acos(x);
  }
};
struct Atan {
  template <typename C>
  C operator()(C x) const {
    return std::atan(x);
  }
};
struct Sinh {
  template <typename C>
  C operator()(C x) const {
    return std::sinh(x);
  }
};
struct Cosh {
  template <typename C>
  C operator()(C x) const {
    return std::cosh(x);
  }
};
struct Asinh {
  template <typename C>
  C operator()(C x) const {
    return std::asinh(x);
  }
};
struct Acosh {
  template <typename C>
  C operator()(C x) const {
    return std::acosh(x);
  }
};
struct Atanh {
  template <typename C>
  C operator()(C x) const {
    return std::atanh(x);
  }
};

// ---- kernels ---------------------------------------------------------------------------

/// y = op(x) elementwise, same dtype and shape, for the dtypes in Types.
template <typename Types, typename Op>
void map_same_type(KernelContext& ctx, const Op& op, int64_t grain) {
  const Tensor& x = ctx.required_input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if constexpr (requires { Op::kSimd; }) {
    if (x.dtype() == DataType::Float) {  // the active ISA's vectorised loop
      const float* px = x.data<float>();
      float* py = y.data<float>();
      const auto unary = simd().unary;
      parallel_for(x.numel(), ctx.threads(), grain,
                   [&](int64_t b, int64_t e) { unary(Op::kSimd, px + b, py + b, e - b); });
      return;
    }
  }
  dispatch<Types>(x.dtype(), ctx.label(), [&]<typename T>() {
    unary_map(x.data<T>(), y.data<T>(), x.numel(), ctx.threads(), grain,
              [&op](acc_t<T> v) { return op(v); });
  });
}

/// A unary op as a kernel: Op built from the node once, applied by map_same_type.
template <typename Op, typename Types, int64_t Grain = kCostlyGrain>
class UnaryKernel final : public Kernel {
 public:
  explicit UnaryKernel(const KernelInfo& info) : op_(make(info)) {}
  void compute(KernelContext& ctx) const override { map_same_type<Types>(ctx, op_, Grain); }

 private:
  static Op make(const KernelInfo& info) {
    if constexpr (std::is_constructible_v<Op, const KernelInfo&>)
      return Op(info);
    else
      return Op{};
  }
  Op op_;
};

/// Gelu: approximate = "none" (erf) or "tanh", chosen outside the element loop.
class GeluKernel final : public Kernel {
 public:
  explicit GeluKernel(const KernelInfo& info) {
    std::string a = info.node.attr_string("approximate", "none");
    ONYX_CHECK(a == "none" || a == "tanh",
               "[{}] attribute approximate must be 'none' or 'tanh', found '{}'", info.label(), a);
    tanh_ = a == "tanh";
  }
  void compute(KernelContext& ctx) const override {
    if (tanh_)
      map_same_type<FloatTypes>(ctx, GeluTanh{}, kCostlyGrain);
    else
      map_same_type<FloatTypes>(ctx, GeluErf{}, kCostlyGrain);
  }

 private:
  bool tanh_ = false;
};

/// com.microsoft FastGelu(X, bias?) = Gelu_tanh(X + bias), bias [N] over X's last axis: what
/// ONNX Runtime's optimizer writes for the tanh spelling of GELU (GPT-2's), and ours too
/// (inference/fusions_gelu.cpp).
class FastGeluKernel final : public Kernel {
 public:
  explicit FastGeluKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) const override {
    const Tensor* bias = ctx.input(1);
    if (!bias || !bias->defined()) {
      map_same_type<FloatTypes>(ctx, GeluTanh{}, kCostlyGrain);
      return;
    }
    const Tensor& x = ctx.required_input(0);
    const int64_t n = bias->numel();
    check_fast_gelu_bias(ctx, x, *bias);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (n == 0) return;
    const int64_t rows = x.numel() / n;
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T *px = x.data<T>(), *pb = bias->data<T>();
      T* py = y.data<T>();
      parallel_for(rows, ctx.threads(), std::max<int64_t>(1, kCostlyGrain / n),
                   [&](int64_t b, int64_t e) {
                     for (int64_t r = b; r < e; ++r)
                       for (int64_t j = 0; j < n; ++j)
                         py[r * n + j] = T(GeluTanh{}(acc_t<T>(widen1(px[r * n + j])) +
                                                      acc_t<T>(widen1(pb[j]))));
                   });
    });
  }
};

/// Reads element i of a float or float8 tensor as float/double (IsNaN, IsInf).
template <typename F>
void dispatch_float_or_f8(const Tensor& x, const std::string& who, F&& f) {
  if (is_float8(x.dtype())) {
    const uint8_t* p = x.data_as<uint8_t>();
    DataType dt = x.dtype();
    f([p, dt](int64_t i) { return float8_to_float(p[i], dt); });
    return;
  }
  dispatch<FloatTypes>(x.dtype(), who, [&]<typename T>() {
    const T* p = x.data<T>();
    f([p](int64_t i) { return acc_t<T>(p[i]); });
  });
}

/// IsNaN and IsInf (detect_positive / detect_negative): float or float8 in, bool out.
class FloatClassKernel final : public Kernel {
 public:
  explicit FloatClassKernel(const KernelInfo& info) : nan_(info.node.op_type == "IsNaN") {
    pos_ = info.node.attr_int("detect_positive", 1) != 0;
    neg_ = info.node.attr_int("detect_negative", 1) != 0;
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Tensor& y = ctx.allocate_output(0, DataType::Bool, x.shape());
    bool* out = y.data<bool>();
    dispatch_float_or_f8(x, ctx.label(), [&](auto at) {
      parallel_for(x.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          auto v = at(i);
          out[i] = nan_ ? std::isnan(v) : std::isinf(v) && (v > 0 ? pos_ : neg_);
        }
      });
    });
  }

 private:
  bool nan_, pos_ = true, neg_ = true;
};

/// Clip with optional scalar min (input 1) and max (input 2); min is applied first, so
/// min > max gives max everywhere, as numpy.clip does.
class ClipKernel final : public Kernel {
 public:
  explicit ClipKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor* lo = ctx.input(1);
    const Tensor* hi = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    check_clip_bounds(ctx, x, lo, hi);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch<NumericTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using C = acc_t<T>;
      C l = lo ? C(lo->data<T>()[0]) : std::numeric_limits<C>::lowest();
      C h = hi ? C(hi->data<T>()[0]) : std::numeric_limits<C>::max();
      if constexpr (std::is_floating_point_v<C>) {
        if (!lo) l = -std::numeric_limits<C>::infinity();
        if (!hi) h = std::numeric_limits<C>::infinity();
      }
      unary_map(x.data<T>(), y.data<T>(), x.numel(), ctx.threads(), kCheapGrain, [l, h](C v) {
        v = v < l ? l : v;
        return v > h ? h : v;
      });
    });
  }
};

/// PRelu: y = x < 0 ? slope * x : x, slope broadcast (unidirectionally) to x.
class PReluKernel final : public Kernel {
 public:
  using Types = TypeList<float, double, float16, bfloat16, int32_t, int64_t, uint32_t, uint64_t>;
  explicit PReluKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& s = ctx.required_input(1);
    check_same_dtype(ctx, {&x, &s});
    Shape out = broadcast_shapes(ctx.label(), {x.shape(), s.shape()});
    ONYX_CHECK(out == x.shape(), "[{}] slope of shape {} does not broadcast to X of shape {}",
               ctx.label(), shape_str(s.shape()), shape_str(x.shape()));
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    dispatch<Types>(x.dtype(), ctx.label(), [&]<typename T>() {
      using C = acc_t<T>;
      binary_map<T, T, T>(x, s, y, ctx.threads(), kCheapGrain,
                          [](C v, C slope) { return v < C(0) ? wrap_mul(slope, v) : v; });
    });
  }
};

template <typename Op, typename Types, int64_t Grain = kCostlyGrain>
void add_unary(KernelRegistry& r, const char* op, int since) {
  r.add({op, "", since, INT_MAX, "cpu", 0, dtypes_of(Types{}),
         make_factory<UnaryKernel<Op, Types, Grain>>()});
}

}  // namespace

void register_unary_kernels(KernelRegistry& r) {
  constexpr int64_t kCheap = kCheapGrain;
  add_unary<Relu, FloatSigned, kCheap>(r, "Relu", 1);
  add_unary<LeakyRelu, FloatTypes, kCheap>(r, "LeakyRelu", 1);
  add_unary<Elu, FloatTypes>(r, "Elu", 1);
  add_unary<Selu, FloatTypes>(r, "Selu", 1);
  add_unary<Celu, FloatTypes>(r, "Celu", 12);
  add_unary<Sigmoid, FloatTypes>(r, "Sigmoid", 1);
  add_unary<HardSigmoid, FloatTypes, kCheap>(r, "HardSigmoid", 1);
  add_unary<HardSwish, FloatTypes, kCheap>(r, "HardSwish", 14);
  add_unary<Tanh, FloatTypes>(r, "Tanh", 1);
  add_unary<Softplus, FloatTypes>(r, "Softplus", 1);
  add_unary<Softsign, FloatTypes, kCheap>(r, "Softsign", 1);
  add_unary<Mish, FloatTypes>(r, "Mish", 18);
  add_unary<ThresholdedRelu, FloatTypes, kCheap>(r, "ThresholdedRelu", 10);
  add_unary<Shrink, NumericTypes, kCheap>(r, "Shrink", 9);
  add_unary<Erf, NumericTypes>(r, "Erf", 9);
  add_unary<Exp, FloatTypes>(r, "Exp", 1);
  add_unary<Log, FloatTypes>(r, "Log", 1);
  add_unary<Sqrt, FloatTypes>(r, "Sqrt", 1);
  add_unary<Reciprocal, FloatTypes, kCheap>(r, "Reciprocal", 1);
  add_unary<Abs, NumericTypes, kCheap>(r, "Abs", 1);
  add_unary<Neg, FloatSigned, kCheap>(r, "Neg", 1);
  add_unary<Floor, FloatTypes, kCheap>(r, "Floor", 1);
  add_unary<Ceil, FloatTypes, kCheap>(r, "Ceil", 1);
  add_unary<Round, FloatTypes, kCheap>(r, "Round", 11);
  add_unary<Sign, NumericTypes, kCheap>(r, "Sign", 9);
  add_unary<Sin, FloatTypes>(r, "Sin", 7);
  add_unary<Cos, FloatTypes>(r, "Cos", 7);
  add_unary<Tan, FloatTypes>(r, "Tan", 7);
  add_unary<Asin, FloatTypes>(r, "Asin", 7);
  add_unary<Acos, FloatTypes>(r, "Acos", 7);
  add_unary<Atan, FloatTypes>(r, "Atan", 7);
  add_unary<Sinh, FloatTypes>(r, "Sinh", 9);
  add_unary<Cosh, FloatTypes>(r, "Cosh", 9);
  add_unary<Asinh, FloatTypes>(r, "Asinh", 9);
  add_unary<Acosh, FloatTypes>(r, "Acosh", 9);
  add_unary<Atanh, FloatTypes>(r, "Atanh", 9);
  add_unary<BitwiseNot, IntTypes, kCheap>(r, "BitwiseNot", 18);
  add_unary<Not, TypeList<bool>, kCheap>(r, "Not", 1);

  std::vector<DataType> float_and_f8 =
      float_types() + std::vector<DataType>{DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ,
                                            DataType::Float8E5M2, DataType::Float8E5M2FNUZ};
  r.add({"Gelu", "", 20, INT_MAX, "cpu", 0, float_types(), make_factory<GeluKernel>()});
  // ONNX Runtime's contrib Gelu (erf form), which its optimizer writes into saved models and
  // ours (inference/fusions_gelu.cpp) fuses exporters' Erf spellings into at any opset.
  r.add({"Gelu", "com.microsoft", 1, INT_MAX, "cpu", 0, float_types(), make_factory<GeluKernel>()});
  r.add({"FastGelu", "com.microsoft", 1, INT_MAX, "cpu", 0, float_types(),
         make_factory<FastGeluKernel>()});
  r.add({"IsNaN", "", 9, INT_MAX, "cpu", 0, float_and_f8, make_factory<FloatClassKernel>()});
  r.add({"IsInf", "", 10, INT_MAX, "cpu", 0, float_and_f8, make_factory<FloatClassKernel>()});
  r.add({"Clip", "", 1, INT_MAX, "cpu", 0, numeric_types(), make_factory<ClipKernel>()});
  r.add({"PRelu", "", 1, INT_MAX, "cpu", 0, dtypes_of(PReluKernel::Types{}),
         make_factory<PReluKernel>()});
}

}  // namespace onyx::cpu
