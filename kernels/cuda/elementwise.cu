// Device code of the elementwise family: one map kernel (unary ops, Clip, IsNaN/IsInf,
// conversions), one flat and one broadcasting kernel for two inputs (binary ops, Pow) and the
// same pair for three (Where). Ops are functors; 16-bit floats compute in float. Each op
// mirrors its CPU functor in kernels/cpu/elementwise_{unary,binary}.cpp: integer arithmetic
// wraps (two's complement) and never traps, Min/Max let a NaN in the first operand win, Abs
// keeps -0.0, Round is half to even.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise_launch.h"

namespace onyx::cuda::ew {
namespace {

namespace cs = ::cuda::std;

using dev::acc_t, dev::aligned16, dev::grid_for, dev::kThreads, dev::map, dev::narrow, dev::Vec,
    dev::vec_width, dev::widen, dev::Word, dev::wrap_t;

// ---- element types -------------------------------------------------------------------------

template <DType D> struct Storage;
template <> struct Storage<DType::F32> { using type = float; };
template <> struct Storage<DType::F64> { using type = double; };
template <> struct Storage<DType::F16> { using type = __half; };
template <> struct Storage<DType::BF16> { using type = __nv_bfloat16; };
template <> struct Storage<DType::I8> { using type = int8_t; };
template <> struct Storage<DType::I16> { using type = int16_t; };
template <> struct Storage<DType::I32> { using type = int32_t; };
template <> struct Storage<DType::I64> { using type = int64_t; };
template <> struct Storage<DType::U8> { using type = uint8_t; };
template <> struct Storage<DType::U16> { using type = uint16_t; };
template <> struct Storage<DType::U32> { using type = uint32_t; };
template <> struct Storage<DType::U64> { using type = uint64_t; };
template <> struct Storage<DType::Bool> { using type = bool; };

template <DType D> struct DTag { static constexpr DType value = D; };

/// Calls f(DTag<D>{}) for the plain (non-float8) dtype t.
template <typename F>
void with_dtype(DType t, F&& f) {
  switch (t) {
    case DType::F32: return f(DTag<DType::F32>{});
    case DType::F64: return f(DTag<DType::F64>{});
    case DType::F16: return f(DTag<DType::F16>{});
    case DType::BF16: return f(DTag<DType::BF16>{});
    case DType::I8: return f(DTag<DType::I8>{});
    case DType::I16: return f(DTag<DType::I16>{});
    case DType::I32: return f(DTag<DType::I32>{});
    case DType::I64: return f(DTag<DType::I64>{});
    case DType::U8: return f(DTag<DType::U8>{});
    case DType::U16: return f(DTag<DType::U16>{});
    case DType::U32: return f(DTag<DType::U32>{});
    case DType::U64: return f(DTag<DType::U64>{});
    case DType::Bool: return f(DTag<DType::Bool>{});
    default: return;  // float8: only launch_float_class takes them
  }
}

// float / double overloads of the libm functions the ops use.
#define ONYX_CUDA_MATH1(fn)                                                  \
  __device__ __forceinline__ float m_##fn(float x) { return ::fn##f(x); }    \
  __device__ __forceinline__ double m_##fn(double x) { return ::fn(x); }
ONYX_CUDA_MATH1(exp) ONYX_CUDA_MATH1(log) ONYX_CUDA_MATH1(sqrt) ONYX_CUDA_MATH1(tanh)
ONYX_CUDA_MATH1(erf) ONYX_CUDA_MATH1(log1p) ONYX_CUDA_MATH1(floor) ONYX_CUDA_MATH1(ceil)
ONYX_CUDA_MATH1(rint) ONYX_CUDA_MATH1(sin) ONYX_CUDA_MATH1(cos) ONYX_CUDA_MATH1(tan)
ONYX_CUDA_MATH1(asin) ONYX_CUDA_MATH1(acos) ONYX_CUDA_MATH1(atan) ONYX_CUDA_MATH1(sinh)
ONYX_CUDA_MATH1(cosh) ONYX_CUDA_MATH1(asinh) ONYX_CUDA_MATH1(acosh) ONYX_CUDA_MATH1(atanh)
ONYX_CUDA_MATH1(fabs)
#undef ONYX_CUDA_MATH1
__device__ __forceinline__ float m_fmod(float a, float b) { return ::fmodf(a, b); }
__device__ __forceinline__ double m_fmod(double a, double b) { return ::fmod(a, b); }
__device__ __forceinline__ float m_pow(float a, float b) { return ::powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return ::pow(a, b); }

// ---- integer helpers (as kernels/cpu/wrap_int.h and graph/saturate_cast.h) -----------------

template <typename C>
constexpr bool kSignedInt = cs::is_integral_v<C> && cs::is_signed_v<C>;

template <typename C>
__device__ __forceinline__ C wrap_neg(C x) {
  if constexpr (kSignedInt<C>)
    return static_cast<C>(wrap_t<C>(0) - wrap_t<C>(x));
  else
    return -x;
}
template <typename C>
__device__ __forceinline__ C wrap_mul(C a, C b) {
  if constexpr (cs::is_integral_v<C>)
    return C(wrap_t<C>(a) * wrap_t<C>(b));
  else
    return a * b;
}

/// NaN gives 0, values past C's range clamp to it.
template <typename C>
__device__ __forceinline__ C saturate(double v) {
  if (v != v) return C(0);
  if (v <= double(cs::numeric_limits<C>::lowest())) return cs::numeric_limits<C>::lowest();
  if (v >= double(cs::numeric_limits<C>::max())) return cs::numeric_limits<C>::max();
  return static_cast<C>(v);
}

/// std::max / std::min exactly (a NaN second operand loses, a NaN first one wins).
template <typename C>
__device__ __forceinline__ C smax(C a, C b) { return a < b ? b : a; }
template <typename C>
__device__ __forceinline__ C smin(C a, C b) { return b < a ? b : a; }

template <typename C>
__device__ __forceinline__ C gelu_tanh(C x) {
  return C(0.5) * x * (C(1) + m_tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));
}
template <typename C>
__device__ __forceinline__ C softplus(C x) {
  return x > C(0) ? x + m_log1p(m_exp(-x)) : m_log1p(m_exp(x));
}

// ---- unary ops ------------------------------------------------------------------------------

template <UnaryOp Op, typename C>
__device__ __forceinline__ C unary_apply(C x, const UnaryParams& p) {
  using U = UnaryOp;
  if constexpr (Op == U::Abs) {
    if constexpr (cs::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? wrap_neg(x) : x;
  } else if constexpr (Op == U::Neg) {
    return wrap_neg(x);
  } else if constexpr (Op == U::Exp) {
    return m_exp(x);
  } else if constexpr (Op == U::Log) {
    return m_log(x);
  } else if constexpr (Op == U::Sqrt) {
    return m_sqrt(x);
  } else if constexpr (Op == U::Reciprocal) {
    return C(1) / x;
  } else if constexpr (Op == U::Relu) {
    return x > C(0) ? x : C(0);
  } else if constexpr (Op == U::LeakyRelu) {
    return x >= C(0) ? x : C(p.alpha) * x;
  } else if constexpr (Op == U::Elu) {
    return x >= C(0) ? x : C(p.alpha) * (m_exp(x) - C(1));
  } else if constexpr (Op == U::Selu) {
    return C(p.beta) * (x > C(0) ? x : C(p.alpha) * m_exp(x) - C(p.alpha));
  } else if constexpr (Op == U::Celu) {
    return smax(C(0), x) + smin(C(0), C(p.alpha) * (m_exp(x / C(p.alpha)) - C(1)));
  } else if constexpr (Op == U::Sigmoid) {
    return C(1) / (C(1) + m_exp(-x));
  } else if constexpr (Op == U::HardSigmoid) {
    return smax(C(0), smin(C(1), C(p.alpha) * x + C(p.beta)));
  } else if constexpr (Op == U::HardSwish) {
    return x * smax(C(0), smin(C(1), x / C(6) + C(0.5)));
  } else if constexpr (Op == U::Tanh) {
    return m_tanh(x);
  } else if constexpr (Op == U::Softplus) {
    return softplus(x);
  } else if constexpr (Op == U::Softsign) {
    return x / (C(1) + m_fabs(x));
  } else if constexpr (Op == U::Mish) {
    return x * m_tanh(softplus(x));
  } else if constexpr (Op == U::ThresholdedRelu) {
    return x > C(p.alpha) ? x : C(0);
  } else if constexpr (Op == U::Shrink) {  // in double; integers saturate back
    const double v = double(x), bias = p.alpha, lambd = p.beta;
    if (!(v < -lambd) && !(v > lambd)) return C(0);
    const double r = v < -lambd ? v + bias : v - bias;
    if constexpr (cs::is_integral_v<C>)
      return saturate<C>(r);
    else
      return C(r);
  } else if constexpr (Op == U::Erf) {  // integers through double, saturating back
    if constexpr (cs::is_integral_v<C>)
      return saturate<C>(::erf(double(x)));
    else
      return m_erf(x);
  } else if constexpr (Op == U::Floor) {
    return m_floor(x);
  } else if constexpr (Op == U::Ceil) {
    return m_ceil(x);
  } else if constexpr (Op == U::Round) {
    return m_rint(x);
  } else if constexpr (Op == U::Sign) {
    if constexpr (cs::is_unsigned_v<C>) {
      return C(x != C(0));
    } else {
      if constexpr (!cs::is_integral_v<C>)
        if (x != x) return x;
      return C((C(0) < x) - (x < C(0)));
    }
  } else if constexpr (Op == U::Sin) {
    return m_sin(x);
  } else if constexpr (Op == U::Cos) {
    return m_cos(x);
  } else if constexpr (Op == U::Tan) {
    return m_tan(x);
  } else if constexpr (Op == U::Asin) {
    return m_asin(x);
  } else if constexpr (Op == U::Acos) {
    return m_acos(x);
  } else if constexpr (Op == U::Atan) {
    return m_atan(x);
  } else if constexpr (Op == U::Sinh) {
    return m_sinh(x);
  } else if constexpr (Op == U::Cosh) {
    return m_cosh(x);
  } else if constexpr (Op == U::Asinh) {
    return m_asinh(x);
  } else if constexpr (Op == U::Acosh) {
    return m_acosh(x);
  } else if constexpr (Op == U::Atanh) {
    return m_atanh(x);
  } else if constexpr (Op == U::BitwiseNot) {
    return static_cast<C>(~x);
  } else if constexpr (Op == U::Not) {
    return !x;
  } else if constexpr (Op == U::GeluErf) {
    return C(0.5) * x * (C(1) + m_erf(x * C(0.7071067811865476)));
  } else if constexpr (Op == U::GeluTanh) {
    return gelu_tanh(x);
  } else {
    static_assert(Op == U::DivBy, "unhandled unary op");
    return x / C(p.alpha);
  }
}

template <UnaryOp Op, typename T>
struct UnaryF {
  UnaryParams p;
  __device__ T operator()(T x) const { return narrow<T>(unary_apply<Op>(widen(x), p)); }
};

template <typename T>
struct ClipF {
  acc_t<T> lo, hi;
  __device__ T operator()(T x) const {
    acc_t<T> v = widen(x);
    v = v < lo ? lo : v;
    return narrow<T>(v > hi ? hi : v);
  }
};

template <typename T>
struct FloatClassF {
  bool nan, pos, neg;
  __device__ bool operator()(T x) const {
    const acc_t<T> v = widen(x), inf = cs::numeric_limits<acc_t<T>>::infinity();
    if (nan) return v != v;
    return v == inf ? pos : v == -inf ? neg : false;
  }
};

/// IsNaN / IsInf straight from the float8 bits (the encodings of graph/float8.cpp).
template <DType D>
struct Float8ClassF {
  bool nan, pos, neg;
  __device__ bool operator()(uint8_t b) const {
    const unsigned mag = b & 0x7fu;
    bool is_nan = false, is_inf = false;
    if constexpr (D == DType::F8E4M3FN) {
      is_nan = mag == 0x7f;
    } else if constexpr (D == DType::F8E5M2) {
      is_nan = mag > 0x7c;
      is_inf = mag == 0x7c;
    } else {  // fnuz: 0x80 is the one NaN, no infinity
      is_nan = b == 0x80;
    }
    if (nan) return is_nan;
    return is_inf && ((b & 0x80) ? neg : pos);
  }
};

/// Pow's exponent widened to int64 (integer bases: uint64 wraps as the CPU's int64_t(e) does)
/// or double.
template <typename T, typename Out>
struct WidenF {
  __device__ Out operator()(T x) const { return static_cast<Out>(widen(x)); }
};

// ---- binary ops -----------------------------------------------------------------------------

template <BinaryOp Op, typename C>
__device__ __forceinline__ auto binary_apply(C a, C b, const BinaryParams& p) {
  using B = BinaryOp;
  constexpr bool kInt = cs::is_integral_v<C>;
  if constexpr (Op == B::Add || Op == B::Sub || Op == B::Mul) {
    if constexpr (kInt) {
      const wrap_t<C> x = wrap_t<C>(a), y = wrap_t<C>(b);
      return C(Op == B::Add ? x + y : Op == B::Sub ? x - y : x * y);
    } else {
      return Op == B::Add ? a + b : Op == B::Sub ? a - b : a * b;
    }
  } else if constexpr (Op == B::Div) {  // integers truncate; x / 0 is 0
    if constexpr (kInt) {
      if (b == C(0)) return C(0);
      if constexpr (kSignedInt<C>)
        if (b == C(-1)) return wrap_neg(a);
      return C(a / b);
    } else {
      return a / b;
    }
  } else if constexpr (Op == B::Mod) {  // fmod: the dividend's sign; else the divisor's
    C r;
    if constexpr (kInt) {
      if (b == C(0)) return C(0);
      if constexpr (kSignedInt<C>)
        if (b == C(-1)) return C(0);
      r = C(a % b);
    } else {
      r = m_fmod(a, b);
    }
    if constexpr (!cs::is_unsigned_v<C>)
      if (!p.fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = C(r + b);
    return r;
  } else if constexpr (Op == B::Min || Op == B::Max) {
    if constexpr (!kInt)
      if (a != a) return a;
    return Op == B::Min ? (b < a ? b : a) : (b > a ? b : a);
  } else if constexpr (Op == B::Equal) {
    return a == b;
  } else if constexpr (Op == B::Less) {
    return a < b;
  } else if constexpr (Op == B::LessOrEqual) {
    return a <= b;
  } else if constexpr (Op == B::Greater) {
    return a > b;
  } else if constexpr (Op == B::GreaterOrEqual) {
    return a >= b;
  } else if constexpr (Op == B::And) {
    return a && b;
  } else if constexpr (Op == B::Or) {
    return a || b;
  } else if constexpr (Op == B::Xor) {
    return a != b;
  } else if constexpr (Op == B::BitShift) {  // by the width or more gives 0
    if (b >= C(sizeof(C) * 8)) return C(0);
    return p.shift_left ? C(wrap_t<C>(a) << b) : C(a >> b);
  } else if constexpr (Op == B::BitwiseAnd) {
    return C(a & b);
  } else if constexpr (Op == B::BitwiseOr) {
    return C(a | b);
  } else if constexpr (Op == B::BitwiseXor) {
    return C(a ^ b);
  } else if constexpr (Op == B::PRelu) {  // a = x, b = slope
    if constexpr (cs::is_unsigned_v<C>)
      return a;
    else
      return a < C(0) ? wrap_mul(b, a) : a;
  } else {
    static_assert(Op == B::AddGeluTanh, "unhandled binary op");
    return gelu_tanh(a + b);
  }
}

template <BinaryOp Op, typename T>
struct BinaryF {
  using Out = cs::conditional_t<binary_bool_out(Op), bool, T>;
  BinaryParams p;
  __device__ Out operator()(T a, T b) const {
    return narrow<Out>(binary_apply<Op>(widen(a), widen(b), p));
  }
};

template <typename T>
__device__ T int_pow(T base, int64_t e) {  // wraps like numpy's integer power
  if (e < 0) return base == T(1) ? T(1) : base == T(-1) ? (e % 2 ? T(-1) : T(1)) : T(0);
  wrap_t<T> r = 1, b = wrap_t<T>(base);
  for (; e; e >>= 1, b *= b)
    if (e & 1) r *= b;
  return T(r);
}

template <typename T>
__device__ T double_to_int(double v) {  // out of range gives x86's 0x80..0, as on the CPU
  if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18))
    return T(cs::numeric_limits<int64_t>::min());
  return T(int64_t(v));
}

/// Pow(x, e), e already widened to int64 or double (see PowKernel in elementwise.cpp).
template <typename T, typename E>
struct PowF {
  bool same, scalar;
  __device__ T operator()(T x, E e) const {
    using C = acc_t<T>;
    const C v = widen(x);
    if constexpr (cs::is_integral_v<T>) {
      if constexpr (cs::is_integral_v<E>)
        return int_pow<T>(v, int64_t(e));
      else
        return double_to_int<T>(::pow(double(v), double(e)));
    } else {
      if (scalar && (e == E(2) || e == E(3))) {  // one rounding from double, as the CPU
        const double d = double(v);
        return narrow<T>(C(e == E(3) ? d * d * d : d * d));
      }
      if (same) return narrow<T>(m_pow(v, C(e)));
      return narrow<T>(C(::pow(double(v), double(e))));
    }
  }
};

template <typename T>
struct WhereF {
  __device__ T operator()(bool c, T x, T y) const { return c ? x : y; }
};

// ---- kernels --------------------------------------------------------------------------------

/// Per-input element offsets of output element i. The loop is unrolled over kMaxDims so the
/// descriptor stays in registers / the constant bank instead of local memory.
template <typename Idx, int K>
__device__ __forceinline__ void bcast_offsets(const Broadcast& bc, Idx i, Idx (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= bc.rank) continue;
    const Idx dim = Idx(bc.dims[d]), q = i / dim, r = i - q * dim;
#pragma unroll
    for (int k = 0; k < K; ++k) off[k] += r * Idx(bc.strides[k][d]);
    i = q;
  }
}

/// Two inputs each advancing by 1 (s* true) or fixed at element 0.
template <typename A, typename B, typename Out, typename F>
__global__ void flat2_kernel(const A* a, bool sa, const B* b, bool sb, Out* y, int64_t n,
                             bool vec, F f) {
  constexpr int V = vec_width<A, B, Out>();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const A a0 = a[0];
  const B b0 = b[0];
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / V;
    for (int64_t j = first; j < nv; j += stride) {
      Vec<A, V> va{};
      Vec<B, V> vb{};
      if (sa) va = reinterpret_cast<const Vec<A, V>*>(a)[j];
      if (sb) vb = reinterpret_cast<const Vec<B, V>*>(b)[j];
      Vec<Out, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) o.v[k] = f(sa ? va.v[k] : a0, sb ? vb.v[k] : b0);
      reinterpret_cast<Vec<Out, V>*>(y)[j] = o;
    }
    done = nv * V;
  }
  for (int64_t j = done + first; j < n; j += stride) y[j] = f(sa ? a[j] : a0, sb ? b[j] : b0);
}

template <typename Idx, typename A, typename B, typename Out, typename F>
__global__ void bcast2_kernel(const A* a, const B* b, Out* y, Broadcast bc, F f) {
  const Idx n = Idx(bc.numel), stride = Idx(gridDim.x) * blockDim.x;
  for (Idx i = Idx(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Idx off[2];
    bcast_offsets<Idx, 2>(bc, i, off);
    y[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename Idx, typename T, typename F>
__global__ void bcast3_kernel(const bool* c, const T* x, const T* y, T* out, Broadcast bc, F f) {
  const Idx n = Idx(bc.numel), stride = Idx(gridDim.x) * blockDim.x;
  for (Idx i = Idx(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Idx off[3];
    bcast_offsets<Idx, 3>(bc, i, off);
    out[i] = f(c[off[0]], x[off[1]], y[off[2]]);
  }
}

/// 32-bit index math when every offset fits (i + grid stride stays below 2^32).
bool fits32(const Broadcast& bc) {
  return bc.numel <= INT32_MAX && bc.max_input_numel <= INT32_MAX;
}

/// Whether input k's offsets are flat (rank <= 1): then it advances by `step` 0 or 1.
bool flat_input(const Broadcast& bc, int k, bool* step) {
  if (bc.rank == 0) return *step = false, true;
  const int64_t s = bc.strides[k][0];
  *step = s == 1;
  return bc.rank == 1 && (s == 0 || s == 1);
}

template <typename A, typename B, typename Out, typename F>
void run2(const void* a, const void* b, void* y, const Broadcast& bc, F f, cudaStream_t s) {
  if (bc.numel <= 0) return;
  auto pa = static_cast<const A*>(a);
  auto pb = static_cast<const B*>(b);
  auto py = static_cast<Out*>(y);
  bool sa = false, sb = false;
  if (flat_input(bc, 0, &sa) && flat_input(bc, 1, &sb)) {
    constexpr int V = vec_width<A, B, Out>();
    const bool vec = V > 1 && aligned16(y) && (!sa || aligned16(a)) && (!sb || aligned16(b));
    flat2_kernel<A, B, Out, F><<<grid_for(vec ? (bc.numel + V - 1) / V : bc.numel), kThreads, 0,
                                 s>>>(pa, sa, pb, sb, py, bc.numel, vec, f);
  } else if (fits32(bc)) {
    bcast2_kernel<uint32_t, A, B, Out, F><<<grid_for(bc.numel), kThreads, 0, s>>>(pa, pb, py, bc, f);
  } else {
    bcast2_kernel<int64_t, A, B, Out, F><<<grid_for(bc.numel), kThreads, 0, s>>>(pa, pb, py, bc, f);
  }
}

template <int Bytes>
void run_where(const bool* c, const void* x, const void* y, void* out, const Broadcast& bc,
               cudaStream_t s) {
  using T = typename Word<Bytes>::type;
  auto px = static_cast<const T*>(x);
  auto py = static_cast<const T*>(y);
  auto po = static_cast<T*>(out);
  if (fits32(bc))
    bcast3_kernel<uint32_t, T><<<grid_for(bc.numel), kThreads, 0, s>>>(c, px, py, po, bc, WhereF<T>{});
  else
    bcast3_kernel<int64_t, T><<<grid_for(bc.numel), kThreads, 0, s>>>(c, px, py, po, bc, WhereF<T>{});
}

template <UnaryOp O> struct UTag { static constexpr UnaryOp value = O; };
template <BinaryOp O> struct BTag { static constexpr BinaryOp value = O; };

template <typename F>
void with_unary(UnaryOp op, F&& f) {
#define ONYX_CUDA_CASE(o, set) \
  case UnaryOp::o: return f(UTag<UnaryOp::o>{});
  switch (op) { ONYX_CUDA_UNARY_OPS(ONYX_CUDA_CASE) }
#undef ONYX_CUDA_CASE
}

template <typename F>
void with_binary(BinaryOp op, F&& f) {
#define ONYX_CUDA_CASE(o, set) \
  case BinaryOp::o: return f(BTag<BinaryOp::o>{});
  switch (op) { ONYX_CUDA_BINARY_OPS(ONYX_CUDA_CASE) }
#undef ONYX_CUDA_CASE
}

}  // namespace

void launch_unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, const UnaryParams& p,
                  cudaStream_t s) {
  with_unary(op, [&](auto o) {
    constexpr UnaryOp O = decltype(o)::value;
    with_dtype(t, [&](auto d) {
      constexpr DType D = decltype(d)::value;
      if constexpr (unary_supports(O, D)) {
        using T = typename Storage<D>::type;
        map<T, T>(x, y, n, UnaryF<O, T>{p}, s);
      }
    });
  });
}

void launch_clip(DType t, const void* x, void* y, int64_t n, const void* lo, const void* hi,
                 cudaStream_t s) {
  with_dtype(t, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_numeric(D)) {
      using T = typename Storage<D>::type;
      using C = acc_t<T>;
      C l = cs::numeric_limits<C>::lowest(), h = cs::numeric_limits<C>::max();
      if constexpr (is_float(D)) l = -cs::numeric_limits<C>::infinity(), h = -l;
      if (lo) l = widen(*static_cast<const T*>(lo));  // host values (Clip's host inputs)
      if (hi) h = widen(*static_cast<const T*>(hi));
      map<T, T>(x, y, n, ClipF<T>{l, h}, s);
    }
  });
}

void launch_float_class(DType t, const void* x, bool* y, int64_t n, bool nan, bool pos, bool neg,
                        cudaStream_t s) {
  switch (t) {
    case DType::F8E4M3FN: return map<uint8_t, bool>(x, y, n, Float8ClassF<DType::F8E4M3FN>{nan, pos, neg}, s);
    case DType::F8E5M2: return map<uint8_t, bool>(x, y, n, Float8ClassF<DType::F8E5M2>{nan, pos, neg}, s);
    case DType::F8E4M3FNUZ:
    case DType::F8E5M2FNUZ:
      return map<uint8_t, bool>(x, y, n, Float8ClassF<DType::F8E4M3FNUZ>{nan, pos, neg}, s);
    default:
      with_dtype(t, [&](auto d) {
        constexpr DType D = decltype(d)::value;
        if constexpr (is_float(D)) {
          using T = typename Storage<D>::type;
          map<T, bool>(x, y, n, FloatClassF<T>{nan, pos, neg}, s);
        }
      });
  }
}

void launch_binary(BinaryOp op, DType t, const void* a, const void* b, void* y,
                   const Broadcast& bc, const BinaryParams& p, cudaStream_t s) {
  with_binary(op, [&](auto o) {
    constexpr BinaryOp O = decltype(o)::value;
    with_dtype(t, [&](auto d) {
      constexpr DType D = decltype(d)::value;
      if constexpr (binary_supports(O, D)) {
        using T = typename Storage<D>::type;
        using F = BinaryF<O, T>;
        run2<T, T, typename F::Out>(a, b, y, bc, F{p}, s);
      }
    });
  });
}

void launch_widen_exponent(DType t, bool to_int, const void* x, void* y, int64_t n,
                           cudaStream_t s) {
  with_dtype(t, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (is_numeric(D)) {
      using T = typename Storage<D>::type;
      if constexpr (is_int(D))
        if (to_int) return map<T, int64_t>(x, y, n, WidenF<T, int64_t>{}, s);
      map<T, double>(x, y, n, WidenF<T, double>{}, s);
    }
  });
}

void launch_pow(DType base, bool exp_int, const void* a, const void* b, void* y,
                const Broadcast& bc, bool same_dtype, bool scalar_exp, cudaStream_t s) {
  with_dtype(base, [&](auto d) {
    constexpr DType D = decltype(d)::value;
    if constexpr (in_set(Set::PowBase, D)) {
      using T = typename Storage<D>::type;
      if (exp_int)
        run2<T, int64_t, T>(a, b, y, bc, PowF<T, int64_t>{same_dtype, scalar_exp}, s);
      else
        run2<T, double, T>(a, b, y, bc, PowF<T, double>{same_dtype, scalar_exp}, s);
    }
  });
}

void launch_where(int elem_bytes, const bool* cond, const void* x, const void* y, void* out,
                  const Broadcast& bc, cudaStream_t s) {
  if (bc.numel <= 0) return;
  switch (elem_bytes) {
    case 1: return run_where<1>(cond, x, y, out, bc, s);
    case 2: return run_where<2>(cond, x, y, out, bc, s);
    case 4: return run_where<4>(cond, x, y, out, bc, s);
    case 8: return run_where<8>(cond, x, y, out, bc, s);
    case 16: return run_where<16>(cond, x, y, out, bc, s);
    default: return;
  }
}

}  // namespace onyx::cuda::ew
