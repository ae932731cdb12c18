// Integer arithmetic that wraps around (two's complement, what numpy and ONNX Runtime give)
// instead of overflowing, which is undefined for signed types: done in an unsigned type wide
// enough that it neither promotes to int nor overflows, then converted back (modular).
#pragma once

#include <type_traits>

namespace onyx::cpu {

/// The unsigned type integer C is computed in (at least `unsigned`, so no promotion to int).
template <typename C>
using wrap_t =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

/// Accumulator for sums and products of A: wrap_t for signed integers, A itself otherwise.
template <typename A, bool = std::is_integral_v<A> && std::is_signed_v<A>>
struct wrapping_acc {
  using type = A;
};
template <typename A>
struct wrapping_acc<A, true> {
  using type = wrap_t<A>;
};

/// a + b and a * b, wrapping for integers; plain arithmetic for floating point.
template <typename A>
A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(wrap_t<A>(a) + wrap_t<A>(b));
  else return a + b;
}
template <typename A>
A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(wrap_t<A>(a) * wrap_t<A>(b));
  else return a * b;
}

}  // namespace onyx::cpu
