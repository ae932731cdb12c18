#include "interop/torch_tensor.h"

#include <ATen/ops/from_blob.h>

#include <array>
#include <sstream>
#include <utility>

#include "graph/error.h"

namespace onyx::torch {

namespace {

/// Element types both sides have, with the same bytes per element and the same encoding.
constexpr std::array<std::pair<DataType, c10::ScalarType>, 20> kTypes = {{
    {DataType::Float, c10::ScalarType::Float},
    {DataType::Double, c10::ScalarType::Double},
    {DataType::Float16, c10::ScalarType::Half},
    {DataType::BFloat16, c10::ScalarType::BFloat16},
    {DataType::Int8, c10::ScalarType::Char},
    {DataType::Int16, c10::ScalarType::Short},
    {DataType::Int32, c10::ScalarType::Int},
    {DataType::Int64, c10::ScalarType::Long},
    {DataType::UInt8, c10::ScalarType::Byte},
    {DataType::UInt16, c10::ScalarType::UInt16},
    {DataType::UInt32, c10::ScalarType::UInt32},
    {DataType::UInt64, c10::ScalarType::UInt64},
    {DataType::Bool, c10::ScalarType::Bool},
    {DataType::Complex64, c10::ScalarType::ComplexFloat},
    {DataType::Complex128, c10::ScalarType::ComplexDouble},
    {DataType::Float8E4M3FN, c10::ScalarType::Float8_e4m3fn},
    {DataType::Float8E4M3FNUZ, c10::ScalarType::Float8_e4m3fnuz},
    {DataType::Float8E5M2, c10::ScalarType::Float8_e5m2},
    {DataType::Float8E5M2FNUZ, c10::ScalarType::Float8_e5m2fnuz},
    {DataType::Float8E8M0, c10::ScalarType::Float8_e8m0fnu},
}};

/// "[2, 3] with strides [1, 2]"
std::string layout_str(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes() << " with strides " << t.strides();
  return s.str();
}

/// onyx's device for a torch device. One case per provider: CUDA becomes {CUDA, index} once
/// the CUDA provider is built (the rest of the exchange is device-agnostic: a data pointer and
/// a release callback).
Device onyx_device(const c10::Device& d) {
  switch (d.type()) {
    case c10::DeviceType::CPU:
      return {DeviceType::CPU, 0};
    case c10::DeviceType::CUDA:
      ONYX_THROW("[onyx::torch] a tensor on {} cannot be shared with onyx: the CUDA provider is "
                 "not built (move it to the CPU with .cpu())", d.str());
    default:
      ONYX_THROW("[onyx::torch] a tensor on {} cannot be shared with onyx: onyx has providers for "
                 "cpu only", d.str());
  }
}

c10::Device torch_device(const Device& d) {
  switch (d.type) {
    case DeviceType::CPU:
      return c10::Device(c10::DeviceType::CPU);
    case DeviceType::CUDA:
      ONYX_THROW("[onyx::torch] an onyx tensor on {} cannot be shared with torch: the CUDA "
                 "provider is not built", d.str());
    case DeviceType::Test:
      break;  // the partitioner's test device has no torch counterpart
  }
  ONYX_THROW("[onyx::torch] unknown onyx device type {}", static_cast<int>(d.type));
}

}  // namespace

c10::ScalarType to_scalar_type(DataType dtype) {
  for (const auto& [o, t] : kTypes)
    if (o == dtype) return t;
  ONYX_THROW("[onyx::torch] onyx dtype {} has no torch equivalent (torch has float32/64, "
             "float16, bfloat16, int8-64, uint8-64, bool, complex64/128 and float8 in common with "
             "onyx)", dtype_name(dtype));
}

DataType from_scalar_type(c10::ScalarType type) {
  for (const auto& [o, t] : kTypes)
    if (t == type) return o;
  ONYX_THROW("[onyx::torch] torch dtype {} has no onyx equivalent", c10::toString(type));
}

Tensor from_torch(const at::Tensor& t, bool allow_copy) {
  ONYX_CHECK(t.defined(), "[onyx::torch] from_torch: expected a defined tensor, got an undefined one");
  const Device device = onyx_device(t.device());
  const DataType dtype = from_scalar_type(t.scalar_type());
  at::Tensor src = t;
  if (!t.is_contiguous()) {
    ONYX_CHECK(allow_copy, "[onyx::torch] from_torch: onyx tensors are contiguous and row-major, "
               "but the {} tensor has shape {}; pass allow_copy = true to share a contiguous "
               "copy, or call .contiguous() first", c10::toString(t.scalar_type()), layout_str(t));
    src = t.contiguous();
  }
  Shape shape(src.sizes().begin(), src.sizes().end());
  // The storage covers exactly the elements (data_ptr already includes the storage offset);
  // its release callback owns a reference to the torch tensor, which keeps torch's memory.
  auto storage = std::make_shared<Storage>(src.data_ptr(), src.nbytes(), device,
                                           [keep = src](void*) mutable { keep.reset(); });
  return Tensor(dtype, std::move(shape), std::move(storage));
}

at::Tensor to_torch(const Tensor& t) {
  ONYX_CHECK(t.storage() != nullptr, "[onyx::torch] to_torch: expected a tensor with storage, got "
             "an empty one ({} {})", dtype_name(t.dtype()), shape_str(t.shape()));
  const c10::ScalarType type = to_scalar_type(t.dtype());
  const c10::Device device = torch_device(t.device());
  std::vector<int64_t> sizes(t.shape().begin(), t.shape().end());
  // The deleter owns a reference to the onyx storage (not just the tensor: a reshape or slice
  // view shares it), released when torch frees the tensor.
  return at::from_blob(const_cast<void*>(t.raw()), sizes,
                       [keep = t.storage()](void*) mutable { keep.reset(); },
                       at::TensorOptions().dtype(type).device(device));
}

}  // namespace onyx::torch
