#include "kernels/cpu/reduce_plan.h"

namespace onyx::cpu {

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& who) {
  ONYX_CHECK(axis >= -rank && axis < rank, "[{}] axis {} is out of range for an input of rank {}",
             who, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

AxisSplit split_at_axis(const Shape& s, int64_t axis) {
  AxisSplit r;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < axis) r.outer *= s[i];
    else if (i == axis) r.axis = s[i];
    else r.inner *= s[i];
  }
  return r;
}

AxisSplit split_2d(const Shape& s, int64_t axis) {
  AxisSplit r;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) (i < axis ? r.outer : r.axis) *= s[i];
  return r;
}

int64_t scalar_int_input(const KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.required_input(i);
  ONYX_CHECK(t.dtype() == DataType::Int64 || t.dtype() == DataType::Int32,
             "[{}] {} (input {}) should be int32 or int64 but is {}", ctx.label(), what, i,
             dtype_name(t.dtype()));
  ONYX_CHECK(t.numel() == 1 && t.rank() <= 1,
             "[{}] {} (input {}) should hold one value (shape [] or [1]) but has shape {}",
             ctx.label(), what, i, shape_str(t.shape()));
  return t.to_int64_vector()[0];
}

ReducePlan make_reduce_plan(const Shape& shape, const std::vector<bool>& reduced) {
  ReducePlan p;
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t i = 0; i < shape.size(); ++i) {
    (reduced[i] ? p.red_numel : p.out_numel) *= shape[i];
    if (shape[i] == 1) continue;  // size-1 axes change no offsets
    if (!dims.empty() && red.back() == reduced[i]) {
      dims.back() *= shape[i];
    } else {
      dims.push_back(shape[i]);
      red.push_back(reduced[i]);
    }
  }
  if (p.out_numel == 0 || p.red_numel == 0) return p;
  const size_t n = dims.size();
  if (n == 0) return p;
  if (n == 1) {
    (red[0] ? p.red : p.inner) = dims[0];
    return p;
  }
  if (n == 2) {
    if (red[0]) p.red = dims[0], p.inner = dims[1];
    else p.outer = dims[0], p.red = dims[1];
    return p;
  }
  if (n == 3 && !red[0]) {
    p.outer = dims[0], p.red = dims[1], p.inner = dims[2];
    return p;
  }
  p.general = true;
  std::vector<int64_t> strides(n, 1), red_dims, red_strides;
  for (size_t i = n - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  for (size_t i = 0; i < n; ++i) {
    if (red[i]) {
      red_dims.push_back(dims[i]);
      red_strides.push_back(strides[i]);
    } else {
      p.kept_dims.push_back(dims[i]);
      p.kept_strides.push_back(strides[i]);
    }
  }
  // An innermost reduced axis is a contiguous run; the table lists where runs start.
  if (red[n - 1]) {
    p.red_run = red_dims.back();
    red_dims.pop_back();
    red_strides.pop_back();
  }
  p.red_offsets.assign(1, 0);
  for (size_t i = 0; i < red_dims.size(); ++i) {
    std::vector<int64_t> next;
    next.reserve(p.red_offsets.size() * red_dims[i]);
    for (int64_t off : p.red_offsets)
      for (int64_t k = 0; k < red_dims[i]; ++k) next.push_back(off + k * red_strides[i]);
    p.red_offsets.swap(next);
  }
  return p;
}

}  // namespace onyx::cpu
