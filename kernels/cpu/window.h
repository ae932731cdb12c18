// Sliding-window geometry shared by the convolution and pooling kernels.
#pragma once

#include <algorithm>
#include <array>

#include "graph/tensor.h"
#include "kernels/window_geometry.h"  // WindowSteps, check_attr_values

namespace onyx::cpu {

/// A spatial vector padded in front to 3 dims, so one loop nest serves 1-D, 2-D and 3-D.
inline std::array<int64_t, 3> pad3(const Shape& v, int64_t fill) {
  std::array<int64_t, 3> r{fill, fill, fill};
  std::copy(v.begin(), v.end(), r.begin() + (3 - v.size()));
  return r;
}

}  // namespace onyx::cpu
