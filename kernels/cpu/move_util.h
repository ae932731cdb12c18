// Helpers shared by the CPU data-movement kernels (shape_ops, tensor_ops, gather_scatter):
// element moves by byte width, accepted dtype sets, axis normalisation and strides.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/dispatch.h"
#include "kernels/kernel.h"

namespace onyx::cpu {

/// Calls f<T>() with std::string for strings, else an unsigned type of the element's width.
template <typename F>
void dispatch_move(DataType dt, std::string_view who, F&& f) {
  if (dt == DataType::String)
    f.template operator()<std::string>();
  else
    dispatch_by_size(dt, who, f);
}

/// all_types() plus complex: what most data-movement ops accept since opset 13.
inline std::vector<DataType> movable_types() {
  return all_types() + std::vector<DataType>{DataType::Complex64, DataType::Complex128};
}

/// movable_types() plus float8, float4 and the sub-byte ints (Reshape, Transpose, ... at 21+).
inline std::vector<DataType> stored_types() {
  return movable_types() + std::vector<DataType>{DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ,
                                                 DataType::Float8E5M2,   DataType::Float8E5M2FNUZ,
                                                 DataType::Float8E8M0,   DataType::Float4E2M1,
                                                 DataType::UInt4,        DataType::Int4,
                                                 DataType::UInt2,        DataType::Int2};
}

/// `axis` in [-rank, rank) mapped to [0, rank); onyx::Error naming `who` otherwise.
inline int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& who) {
  ONYX_CHECK(axis >= -rank && axis < rank, "[{}] axis {} is out of range for rank {}", who, axis,
             rank);
  return axis < 0 ? axis + rank : axis;
}

/// Row-major element strides of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/// Product of shape[begin, end).
inline int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) p *= shape[i];
  return p;
}

}  // namespace onyx::cpu
