// Branch-free float exp, tanh and erf that the compiler vectorises inside plain loops (libm's
// calls block vectorisation). Accurate to a few ulp; double keeps using libm.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace onyx::cpu {

#include "kernels/cpu/vmath_body.inc"

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
