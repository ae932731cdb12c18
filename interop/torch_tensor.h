// Zero-copy tensor exchange between libtorch and onyx.
//
//   at::Tensor t = torch::rand({2, 3});
//   onyx::Tensor o = onyx::torch::from_torch(t);   // o.raw() == t.data_ptr(): no copy
//   at::Tensor back = onyx::torch::to_torch(o);    // back.data_ptr() == o.raw(): no copy
//
// Each side keeps the other's memory alive: the onyx::Storage of from_torch holds a reference
// to the at::Tensor until the storage dies, and the at::Tensor of to_torch holds the
// onyx::Storage in its deleter. A write through one side is seen by the other.
//
// Types: every element type both sides have (float32/64, float16, bfloat16, int8/16/32/64,
// uint8/16/32/64, bool, complex64/128 and the float8 types e4m3fn, e4m3fnuz, e5m2, e5m2fnuz,
// e8m0); anything else is an onyx::Error naming the type. Devices: CPU. A CUDA tensor is an
// onyx::Error until the CUDA provider is built; other devices are errors.
#pragma once

#include <ATen/core/Tensor.h>

#include "graph/tensor.h"

namespace onyx::torch {

/// The torch scalar type of an onyx element type; onyx::Error for one torch lacks (string,
/// the 4- and 2-bit types, whose elements onyx keeps one per byte).
c10::ScalarType to_scalar_type(DataType dtype);
/// The onyx element type of a torch scalar type; onyx::Error for one onyx lacks (quantized,
/// complex32, the packed sub-byte types).
DataType from_scalar_type(c10::ScalarType type);

/// An onyx::Tensor over `t`'s memory (same data pointer, dtype and shape).
///
/// onyx tensors are contiguous and row-major. A non-contiguous `t` (a transpose, a strided
/// slice, an expand) is an onyx::Error naming its shape and strides, unless `allow_copy`: then
/// the result views a contiguous copy (t.contiguous()), so writes to it do NOT reach `t`.
/// Contiguous tensors are never copied, whatever `allow_copy` says. An undefined tensor, a
/// tensor on a device onyx has no provider for, or an unsupported dtype is an onyx::Error.
Tensor from_torch(const at::Tensor& t, bool allow_copy = false);

/// An at::Tensor over `t`'s memory (same data pointer, dtype and shape, contiguous strides),
/// on t's device. It does not require grad. onyx::Error for a tensor without storage or of a
/// type torch lacks.
at::Tensor to_torch(const Tensor& t);

}  // namespace onyx::torch
