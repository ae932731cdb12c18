// Branch-free float exp, tanh and erf that the compiler vectorises inside plain loops (libm's
// calls block vectorisation). Accurate to a few ulp; double keeps using libm.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace onyx::cpu {

namespace detail {
// 2^n for an integral float n in [-126, 127], built from float bits (no float-to-int
// conversion, which keeps the loops vectorisable under strict FP semantics).
inline float pow2i(float n) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(n + (127.0f + 12582912.0f)) << 23);
}
// Nearest integer of |x| < 2^22 (adding and removing 1.5 * 2^23 rounds to even).
inline float round_i(float x) { return (x + 12582912.0f) - 12582912.0f; }
// a when take_a else b, as a bit blend (a conditional would not vectorise).
inline float blend(bool take_a, float a, float b) {
  uint32_t m = 0u - uint32_t(take_a);
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}
}  // namespace detail

/// e^x for float: Cody-Waite reduction by ln 2, degree-6 polynomial (Cephes expf), and
/// a two-step scale by 2^n so results stay exact down to the subnormals.
inline float exp_f(float x) {
  x = std::min(std::max(x, -104.0f), 88.8f);  // NaN passes through both
  float n = detail::round_i(x * 1.44269504088896341f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  float n1 = detail::round_i(n * 0.5f);
  return y * detail::pow2i(n1) * detail::pow2i(n - n1);
}

/// tanh for float: odd polynomial near 0 (Cephes tanhf), 1 - 2 / (e^2|x| + 1) beyond.
inline float tanh_f(float x) {
  float a = std::fabs(x);
  float s = x * x;
  float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                  1.33314422036e-1f) *
                     s -
                 3.33332819422e-1f) *
                    s * x +
                x;
  float big = std::copysign(1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f), x);
  return detail::blend(a < 0.625f, small, big);
}

/// erf for float: odd/even rational approximation on [-4, 4] (as in Eigen and XLA);
/// absolute error below 5e-7.
inline float erf_f(float a) {
  float x = std::min(std::max(a, -4.0f), 4.0f);
  float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p - 2.10102402082508e-06f;
  p = x2 * p - 5.69250639462346e-05f;
  p = x2 * p - 7.34990630326855e-04f;
  p = x2 * p - 2.95459980854025e-03f;
  p = x2 * p - 1.60960333262415e-02f;
  float q = x2 * -1.45660718464996e-05f - 2.13374055278905e-04f;
  q = x2 * q - 1.68282697438203e-03f;
  q = x2 * q - 7.37332916720468e-03f;
  q = x2 * q - 1.42647390514189e-02f;
  return x * p / q;
}

/// e^x in the compute type C: the vectorisable version for float, libm otherwise.
template <typename C>
C vexp(C x) {
  if constexpr (std::is_same_v<C, float>)
    return exp_f(x);
  else
    return std::exp(x);
}
template <typename C>
C verf(C x) {
  if constexpr (std::is_same_v<C, float>)
    return erf_f(x);
  else
    return std::erf(x);
}
template <typename C>
C vtanh(C x) {
  if constexpr (std::is_same_v<C, float>)
    return tanh_f(x);
  else
    return std::tanh(x);
}

}  // namespace onyx::cpu
