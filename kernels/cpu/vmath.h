// Branch-free float exp and tanh that the compiler vectorises inside plain loops (libm's
// calls block vectorisation). Accurate to a few ulp; double keeps using libm.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace onyx::cpu {

/// e^x for float: Cody-Waite reduction by ln 2, degree-6 polynomial (Cephes expf), and
/// a two-step scale by 2^n so results stay exact down to the subnormals.
inline float exp_f(float x) {
  x = std::min(std::max(x, -104.0f), 88.8f);  // NaN passes through both
  float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>(uint32_t(n1 + 127) << 23);
  float s2 = std::bit_cast<float>(uint32_t(n2 + 127) << 23);
  return y * s1 * s2;
}

/// tanh for float: odd polynomial near 0 (Cephes tanhf), 1 - 2 / (e^2|x| + 1) beyond.
inline float tanh_f(float x) {
  float a = std::fabs(x);
  float s = x * x;
  float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                  1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
  float big = 1.0f - 2.0f / (exp_f(2.0f * a) + 1.0f);
  big = std::copysign(big, x);
  return a < 0.625f ? small : big;
}

/// e^x in the compute type C: the vectorisable version for float, libm otherwise.
template <typename C>
C vexp(C x) {
  if constexpr (std::is_same_v<C, float>) return exp_f(x);
  else return std::exp(x);
}
template <typename C>
C vtanh(C x) {
  if constexpr (std::is_same_v<C, float>) return tanh_f(x);
  else return std::tanh(x);
}

}  // namespace onyx::cpu
