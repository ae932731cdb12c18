// Cast and CastLike between every ONNX element type: the numeric types, bool, strings,
// float16/bfloat16, the float8 family (saturate, round_mode) and the sub-byte types.
// Conversions follow numpy, which the ONNX reference uses: float to integer truncates,
// integer narrowing wraps, and numbers print as Python's repr does.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "graph/float8.h"
#include "kernels/cast_attrs.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"

namespace onyx::cpu {
namespace {

// Double to integer without undefined behaviour (out of range gives x86's 0x80..0).
template <typename D>
D float_to_int(double v) {
  if constexpr (std::is_same_v<D, uint64_t>)
    if (v >= 9.2233720368547758e18 && v < 1.8446744073709552e19) return D(v);
  if (!(v > -9.2233720368547758e18 && v < 9.2233720368547758e18))
    return D(std::numeric_limits<int64_t>::min());
  return D(int64_t(v));
}

/// One element from a plain (non-float8, non-string) type S to a plain type D.
template <typename D, typename S>
D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<D, bool>) {
    return acc_t<S>(s) != acc_t<S>(0);
  } else if constexpr (std::is_same_v<S, bool>) {
    return D(acc_t<D>(s ? 1 : 0));
  } else if constexpr (std::is_integral_v<D> && !std::is_integral_v<S>) {
    return float_to_int<D>(double(acc_t<S>(s)));
  } else if constexpr (is_half_v<D>) {
    return D(float(acc_t<S>(s)));
  } else {
    return D(acc_t<S>(s));
  }
}

// ---- strings ---------------------------------------------------------------------------

// Python repr layout of a number with significant `digits` and decimal exponent `exp`.
std::string repr_layout(bool neg, const std::string& digits, int exp) {
  std::string out = neg ? "-" : "";
  const size_t nd = digits.size();
  if (exp >= 0 && exp < 16) {  // 123.45, 1000000.0
    const size_t ip = size_t(exp) + 1;
    out.append(digits, 0, std::min(nd, ip)).append(ip > nd ? ip - nd : 0, '0').push_back('.');
    if (nd > ip)
      out.append(digits, ip);
    else
      out.push_back('0');
  } else if (exp < 0 && exp >= -4) {  // 0.00123
    out.append("0.").append(size_t(-exp - 1), '0').append(digits);
  } else {  // 1.5e-05, 1e+16
    out.push_back(digits[0]);
    if (nd > 1) out.append(1, '.').append(digits, 1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out.append(e);
  }
  return out;
}

// Shortest round-trip string of a float value with `prec` significant digits.
std::string repr_digits(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
  std::string s(buf);
  size_t epos = s.find('e');
  int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (std::isdigit(static_cast<unsigned char>(s[i]))) digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  return repr_layout(std::signbit(v), digits, exp);
}

/// numpy's str() of a value: shortest digits that read back to the same value.
template <typename S>
std::string to_text(S s) {
  if constexpr (std::is_same_v<S, bool>) {
    return s ? "True" : "False";
  } else if constexpr (std::is_integral_v<S>) {
    return std::to_string(s);
  } else {
    double v = double(acc_t<S>(s));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
    for (int prec = 1; prec < 17; ++prec) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
      double back = std::strtod(buf, nullptr);
      bool same;
      if constexpr (std::is_same_v<S, double>)
        same = back == v;
      else
        same = acc_t<S>(S(acc_t<S>(back))) == acc_t<S>(s);
      if (same) return repr_digits(v, prec);
    }
    return repr_digits(v, 17);
  }
}

// "+INF", "inf", "NaN" (any case) and decimal/scientific literals; onyx::Error otherwise.
double parse_double(const std::string& text, const std::string& who) {
  std::string t = text;
  t.erase(0, t.find_first_not_of(" \t\n"));
  t.erase(t.find_last_not_of(" \t\n") + 1);
  const char* b = t.c_str();
  char* end = nullptr;
  double v = std::strtod(b, &end);
  ONYX_CHECK(!t.empty() && end == b + t.size(), "[{}] cannot convert string '{}' to a number", who,
             text);
  return v;
}

/// String element to a plain type D (integers parse exactly when they can).
template <typename D>
D from_text(const std::string& text, const std::string& who) {
  if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool>) {
    D v{};
    const char* b = text.data();
    if (!text.empty() && text[0] == '+') ++b;
    auto [p, ec] = std::from_chars(b, text.data() + text.size(), v);
    if (ec == std::errc() && p == text.data() + text.size()) return v;
  }
  if constexpr (std::is_same_v<D, bool>) {
    std::string low = text;
    std::transform(low.begin(), low.end(), low.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (low == "true") return true;
    if (low == "false") return false;
  }
  return convert<D>(parse_double(text, who));
}

// ---- the kernel ------------------------------------------------------------------------

bool is_sub_byte_int(DataType t) { return is_sub_byte(t) && t != DataType::Float4E2M1; }
bool is_small_float(DataType t) { return is_float8(t) || t == DataType::Float8E8M0; }

/// Cast (target from `to`) and CastLike (target = input 1's dtype).
class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelInfo& info)
      : like_(info.node.op_type == "CastLike"),
        to_(like_ ? DataType::Undefined : parse_cast_to(info)),
        saturate_(info.node.attr_int("saturate", 1) != 0),
        round_(parse_e8m0_round(info)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    DataType to = like_ ? ctx.required_input(1).dtype() : to_;
    Tensor& y = ctx.allocate_output(0, to, x.shape());
    if (x.numel() == 0) return;
    if (x.dtype() == to && to != DataType::String) {
      std::memcpy(y.raw(), x.raw(), x.nbytes());
      return;
    }
    // Read float8/float4 as float and sub-byte ints as their 8-bit storage, then convert.
    Tensor src = x;
    if (is_small_float(x.dtype())) {
      src = ctx.scratch(DataType::Float, x.shape());
      const uint8_t* p = x.data_as<uint8_t>();
      float* q = src.data<float>();
      DataType dt = x.dtype();
      parallel_for(x.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) q[i] = float8_to_float(p[i], dt);
      });
    } else if (is_sub_byte_int(x.dtype())) {
      DataType st = is_signed_int(x.dtype()) ? DataType::Int8 : DataType::UInt8;
      src = Tensor(st, x.shape(), x.storage(), x.offset());
    }
    if (src.dtype() == DataType::String) {
      dispatch<AllTypes>(plain_target(to), ctx.label(), [&]<typename D>() {
        const std::string* p = src.data<std::string>();
        if constexpr (std::is_same_v<D, std::string>) {
          std::copy(p, p + src.numel(), y.data<std::string>());
        } else {
          std::string who = ctx.label();
          write(ctx, y, to, src.numel(), [&](int64_t i) { return from_text<D>(p[i], who); });
        }
      });
      return;
    }
    dispatch<NumericBoolTypes>(src.dtype(), ctx.label(), [&]<typename S>() {
      const S* p = src.data<S>();
      if (to == DataType::String) {
        std::string* q = y.data<std::string>();
        for (int64_t i = 0; i < src.numel(); ++i) q[i] = to_text(p[i]);
        return;
      }
      dispatch<NumericBoolTypes>(plain_target(to), ctx.label(), [&]<typename D>() {
        constexpr bool kWiden = is_half_v<S> && std::is_same_v<D, float>;
        constexpr bool kNarrow = std::is_same_v<S, float> && is_half_v<D>;
        if constexpr (kWiden || kNarrow) {  // mixed-precision casts: block conversions
          if (to == dtype_of<D>()) {
            D* q = y.data<D>();
            parallel_for(src.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
              if constexpr (kWiden)
                widen(p + b, q + b, e - b);
              else
                narrow(p + b, q + b, e - b);
            });
            return;
          }
        }
        write(ctx, y, to, src.numel(), [p](int64_t i) { return convert<D>(p[i]); });
      });
    });
  }

 private:
  // The plain type values are produced in before storing as `to`.
  static DataType plain_target(DataType to) {
    if (is_small_float(to)) return DataType::Float;
    if (is_sub_byte_int(to)) return DataType::Int64;
    return to;
  }

  // Stores get(i) (of plain_target(to)'s type) into y, encoding float8 and sub-byte types.
  template <typename Get>
  void write(KernelContext& ctx, Tensor& y, DataType to, int64_t n, Get get) const {
    using D = decltype(get(0));
    parallel_for(n, ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<D, float>) {
        if (is_small_float(to)) {
          uint8_t* q = y.data_as<uint8_t>();
          if (to == DataType::Float8E8M0) {
            for (int64_t i = b; i < e; ++i) q[i] = float_to_float8e8m0(get(i), saturate_, round_);
          } else {
            for (int64_t i = b; i < e; ++i) q[i] = float_to_float8(get(i), to, saturate_);
          }
          return;
        }
      }
      if constexpr (std::is_same_v<D, int64_t>) {
        if (is_sub_byte_int(to)) {  // keep the low bits, sign-extended for signed types
          int bits = (to == DataType::Int4 || to == DataType::UInt4) ? 4 : 2;
          uint64_t mask = (uint64_t(1) << bits) - 1;
          bool sgn = is_signed_int(to);
          uint8_t* q = y.data_as<uint8_t>();
          for (int64_t i = b; i < e; ++i) {
            uint64_t v = uint64_t(get(i)) & mask;
            if (sgn && (v >> (bits - 1))) v |= ~mask;
            q[i] = uint8_t(v);
          }
          return;
        }
      }
      D* q = y.data_as<D>();
      for (int64_t i = b; i < e; ++i) q[i] = get(i);
    });
  }

  bool like_;
  DataType to_;
  bool saturate_;
  E8M0Round round_;
};

std::vector<DataType> cast_types() {
  return all_types() + std::vector<DataType>{DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ,
                                             DataType::Float8E5M2,   DataType::Float8E5M2FNUZ,
                                             DataType::Float8E8M0,   DataType::Float4E2M1,
                                             DataType::UInt4,        DataType::Int4,
                                             DataType::UInt2,        DataType::Int2};
}

}  // namespace

void register_cast_kernels(KernelRegistry& r) {
  r.add({"Cast", "", 1, INT_MAX, "cpu", 0, cast_types(), make_factory<CastKernel>()});
  r.add({"CastLike", "", 15, INT_MAX, "cpu", 0, cast_types(), make_factory<CastKernel>()});
}

}  // namespace onyx::cpu
