// DLPack exchange: hand an onyx Tensor to another framework (numpy, torch, JAX, CuPy) and
// view theirs, both without copying bytes. Plain C++; the Python package wraps these in
// capsules (python/src/tensor.cpp).
//
//   DLManagedTensor* m = onyx::to_dlpack(t);   // the consumer calls m->deleter when done
//   onyx::Tensor v = onyx::from_dlpack(other);  // v's storage calls other->deleter at the end
//
// Built against DLPack 0.6 (Debian's libdlpack-dev), the unversioned DLManagedTensor ABI that
// every consumer still accepts. Booleans use kDLBool (code 6, DLPack 0.8), which numpy >= 1.25
// and torch >= 1.12 produce and accept; 0.6's header does not name it.
#pragma once

#include <dlpack/dlpack.h>

#include "graph/tensor.h"

namespace onyx {

/// DLPack 0.8's type code for booleans (one byte per element).
inline constexpr uint8_t kDLBoolCode = 6;

/// The DLPack type of an onyx dtype: float16/bfloat16/float/double, int8..int64,
/// uint8..uint64 and bool. onyx::Error for the rest (strings, float8, sub-byte, complex).
DLDataType to_dlpack_dtype(DataType dtype);
/// The onyx dtype of a DLPack type (one lane); onyx::Error naming code, bits and lanes for
/// the types onyx does not know.
DataType from_dlpack_dtype(DLDataType dtype);

/// A DLPack view of `t` (a defined CPU tensor of a type to_dlpack_dtype knows; onyx::Error
/// otherwise). The managed tensor holds a reference to t's storage, so the bytes stay valid
/// until the consumer calls its deleter, however long the Tensor itself lives. Shape and
/// row-major strides are given explicitly, in elements; byte_offset is 0.
DLManagedTensor* to_dlpack(const Tensor& t);

struct FromDlpackOptions {
  /// onyx tensors are contiguous and row-major. A producer's tensor with other strides
  /// (a transposed or sliced view) is refused unless this is set; then its elements are
  /// copied into a new row-major tensor and the producer's deleter runs at once. The result
  /// is then no longer a view: writes to it do not reach the producer.
  bool copy_if_strided = false;
};

/// A Tensor viewing `managed`'s memory. On success onyx owns `managed`: its deleter runs
/// exactly once, when the last Tensor sharing the returned storage dies (or at once after a
/// copy_if_strided copy). On failure (onyx::Error: null tensor, non-CPU device, unknown
/// dtype, negative dims, non-row-major strides without copy_if_strided) `managed` is left
/// untouched and still belongs to the caller, who releases it as it would have otherwise
/// (from Python: the capsule stays unconsumed and its destructor calls the deleter).
Tensor from_dlpack(DLManagedTensor* managed, const FromDlpackOptions& options = {});

}  // namespace onyx
