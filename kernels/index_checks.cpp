// Gather/scatter input checks for every provider (kernels/index_checks.h).
#include "kernels/index_checks.h"

#include <string>

#include "kernels/shape_util.h"

namespace onyx {

ScatterReduction parse_scatter_reduction(const KernelInfo& info) {
  std::string r = info.node.attr_string("reduction", "none");
  if (r == "none") return ScatterReduction::None;
  if (r == "add" && info.opset >= 16) return ScatterReduction::Add;
  if (r == "mul" && info.opset >= 16) return ScatterReduction::Mul;
  if (r == "max" && info.opset >= 18) return ScatterReduction::Max;
  if (r == "min" && info.opset >= 18) return ScatterReduction::Min;
  ONYX_THROW("[{}] unknown reduction '{}' at opset {}", info.label(), r, info.opset);
}

void check_element_indices(const KernelContext& ctx, const Tensor& x, const Tensor& ind) {
  bool ok = ind.rank() == x.rank();
  for (int64_t d = 0; ok && d < x.rank(); ++d)
    ok = ind.shape()[static_cast<size_t>(d)] <= x.shape()[static_cast<size_t>(d)] ||
         ind.numel() == 0;
  ONYX_CHECK(ok, "[{}] indices shape {} should have data's rank and fit in data shape {}",
             ctx.label(), shape_str(ind.shape()), shape_str(x.shape()));
}

void check_element_updates(const KernelContext& ctx, const Tensor& x, const Tensor& ind,
                           const Tensor& upd) {
  ONYX_CHECK(upd.shape() == ind.shape() && upd.dtype() == x.dtype(),
             "[{}] updates {}{} should match indices shape {} and data dtype {}", ctx.label(),
             dtype_name(upd.dtype()), shape_str(upd.shape()), shape_str(ind.shape()),
             dtype_name(x.dtype()));
}

size_t nd_tuple_length(const KernelContext& ctx, const Tensor& ind, const Shape& shape,
                       size_t batch) {
  ONYX_CHECK(ind.dtype() == DataType::Int64, "[{}] indices should be int64 but are {}", ctx.label(),
             dtype_name(ind.dtype()));
  ONYX_CHECK(ind.rank() >= 1, "[{}] indices should have rank >= 1", ctx.label());
  auto k = static_cast<size_t>(ind.dim(-1));
  ONYX_CHECK(k <= shape.size() - batch, "[{}] indices tuples of {} do not fit data shape {}",
             ctx.label(), k, shape_str(shape));
  return k;
}

void check_nd_updates(const KernelContext& ctx, const Tensor& x, const Tensor& ind, size_t k,
                      const Tensor& upd) {
  check_nd_updates(ctx, x.shape(), x.dtype(), ind, k, upd);
}

void check_nd_updates(const KernelContext& ctx, const Shape& shape, DataType dtype,
                      const Tensor& ind, size_t k, const Tensor& upd) {
  Shape want(ind.shape().begin(), ind.shape().end() - 1);
  want.insert(want.end(), shape.begin() + static_cast<int64_t>(k), shape.end());
  ONYX_CHECK(upd.shape() == want && upd.dtype() == dtype,
             "[{}] updates should be {}{} but are {}{}", ctx.label(), dtype_name(dtype),
             shape_str(want), dtype_name(upd.dtype()), shape_str(upd.shape()));
}

std::vector<int64_t> nd_offsets(const KernelContext& ctx, const Tensor& ind, const Shape& shape,
                                size_t batch) {
  const size_t k = nd_tuple_length(ctx, ind, shape, batch);
  auto strides =
      contiguous_strides(Shape(shape.begin() + static_cast<int64_t>(batch), shape.end()));
  const int64_t* v = ind.data<int64_t>();
  size_t n = k ? static_cast<size_t>(ind.numel()) / k : static_cast<size_t>(ind.numel());
  std::vector<int64_t> offs(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < k; ++j) {
      int64_t d = shape[batch + j], x = v[i * k + j];
      ONYX_CHECK(x >= -d && x < d, "[{}] index {} is out of range for dim {} of size {}",
                 ctx.label(), x, batch + j, d);
      offs[i] += (x < 0 ? x + d : x) * strides[j];
    }
  return offs;
}

}  // namespace onyx
