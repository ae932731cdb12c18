// The onyx._onyx extension: one bind_* function per file, and the conversions they share
// between Python objects and onyx Tensors.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace onyx::py {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_tensor(nb::module_& m);
void bind_inference(nb::module_& m);
void bind_training(nb::module_& m);
void bind_autograd(nb::module_& m);

/// How to_tensor treats objects that cannot be viewed as they are.
enum class Convert {
  /// Only views: an onyx.Tensor or a DLPack producer whose memory is row-major and exportable
  /// (onyx.from_dlpack's promise); anything else is an error.
  ViewOnly,
  /// As ViewOnly, but a strided producer (a transpose, a sliced view) is copied row-major.
  CopyStrided,
  /// Views when possible, else one copy (ONNX Runtime's feeds: lists, scalars, read-only or
  /// strided numpy arrays, numpy string arrays).
  CopyIfNeeded,
};

/// An onyx Tensor for `obj`: an onyx.Tensor as it is, else through the object's __dlpack__
/// (numpy arrays, torch tensors, ...), so the Tensor's storage keeps the producer's memory
/// alive and writes go both ways. `what` names the argument in errors ("input 'x'").
/// Call with the GIL held.
Tensor to_tensor(nb::handle obj, const std::string& what, Convert convert);

/// A numpy array viewing `t` (no copy; the array keeps t's storage alive). Types numpy lacks
/// (bfloat16, float8, int4, ...) come as ml_dtypes arrays; string tensors are copied into an
/// object array, as ONNX Runtime returns them.
nb::object to_numpy(const Tensor& t);

/// numpy's dtype for an onyx dtype (an ml_dtypes one where numpy has none).
nb::object numpy_dtype(DataType dtype);

/// A model given as a path (str or os.PathLike) or as serialized bytes; a path's external data
/// is mapped in place or copied as `map_external_data` says (LoadOptions).
std::unique_ptr<Model> load_model_arg(nb::handle model, bool map_external_data = true);

/// ONNX Runtime's spelling of a value's type: "tensor(float)", "seq(tensor(int64))", ...
std::string ort_type_string(const ValueType& type);

}  // namespace onyx::py
