// Integer positions of sampling coordinates that come from data (GridSample's grid,
// DeformConv's offsets): such a coordinate may be NaN, infinite or far outside any image.
#pragma once

#include <cmath>
#include <cstdint>

namespace onyx::cpu {

/// floor(x) when |x| < 2^62; otherwise (NaN included) -2^62, a position outside every image
/// that still leaves room for the few taps added to it. A plain cast would be undefined.
inline int64_t floor_index(double x) {
  constexpr double kFar = 4.6e18;  // just under 2^62
  return (x > -kFar && x < kFar) ? static_cast<int64_t>(std::floor(x)) : -(int64_t{1} << 62);
}

}  // namespace onyx::cpu
