// Float to integer conversion without undefined behaviour, for values that come from data or
// attributes (a float read as an index or size, a mean computed in floating point for an
// integer tensor), where a plain cast of NaN or of a value past the type's range is undefined.
#pragma once

#include <limits>
#include <type_traits>

namespace onyx {

/// NaN gives 0 and values past T's range clamp to it; any other pair of arithmetic types is a
/// plain static_cast.
template <typename T, typename A>
T saturate_cast(A v) {
  if constexpr (std::is_integral_v<T> && std::is_floating_point_v<A>) {
    if (v != v) return T(0);
    if (v <= A(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= A(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace onyx
