// Host-side shape arithmetic that kernels of every provider share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/error.h"
#include "graph/tensor.h"

namespace onyx {

/// `axis` in [-rank, rank) made non-negative; onyx::Error naming `who` otherwise.
inline int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& who) {
  ONYX_CHECK(axis >= -rank && axis < rank, "[{}] axis {} is out of range for rank {}", who, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

/// Product of shape[begin, end) (1 when empty).
inline int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) p *= shape[i];
  return p;
}

/// Row-major element strides of a contiguous tensor of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/// numpy broadcast of `shapes`; onyx::Error starting with "[who]" naming the shapes when
/// they do not broadcast.
Shape broadcast_shapes(std::string_view who, const std::vector<Shape>& shapes);

}  // namespace onyx
