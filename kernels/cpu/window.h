// Sliding-window geometry shared by the convolution and pooling kernels.
#pragma once

#include <algorithm>
#include <array>
#include <string>

#include "graph/error.h"
#include "graph/tensor.h"

namespace onyx::cpu {

/// A spatial vector padded in front to 3 dims, so one loop nest serves 1-D, 2-D and 3-D.
inline std::array<int64_t, 3> pad3(const Shape& v, int64_t fill) {
  std::array<int64_t, 3> r{fill, fill, fill};
  std::copy(v.begin(), v.end(), r.begin() + (3 - v.size()));
  return r;
}

/// Every value of an INTS attribute in [lo, hi], checked when the kernel is created: the error
/// names the node, the attribute, the list and the allowed range.
inline void check_attr_values(const std::string& label, const char* name, const Shape& v,
                              int64_t lo, int64_t hi) {
  for (int64_t x : v)
    ONYX_CHECK(x >= lo && x <= hi, "[{}] attribute '{}' holds [{}]: {} is outside [{}, {}]", label,
               name, fmt::join(v, ", "), x, lo, hi);
}

/// Strides and dilations of a window op over `nsp` spatial dims, 1 where the attribute is
/// absent; onyx::Error when they or `pads` do not fit `nsp` or a step is below 1.
struct WindowSteps {
  Shape stride, dil;
  WindowSteps(const std::string& label, const Shape& strides, const Shape& dilations,
              const Shape& pads, size_t nsp)
      : stride(strides.empty() ? Shape(nsp, 1) : strides),
        dil(dilations.empty() ? Shape(nsp, 1) : dilations) {
    ONYX_CHECK(stride.size() == nsp && dil.size() == nsp && (pads.empty() || pads.size() == 2 * nsp),
               "[{}] strides {}, dilations {} or pads {} do not fit {} spatial dims", label,
               shape_str(strides), shape_str(dilations), shape_str(pads), nsp);
    for (size_t i = 0; i < nsp; ++i)
      ONYX_CHECK(stride[i] >= 1 && dil[i] >= 1, "[{}] strides and dilations must be >= 1", label);
  }
};

}  // namespace onyx::cpu
