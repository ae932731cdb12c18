// Conversions between onyx types and the onnx protobuf messages (internal to graph/).
#pragma once

#include <onnx/onnx_pb.h>
#include <onnx/onnx-data.pb.h>


#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"
#include "graph/mapped_file.h"

namespace onyx {

/// A copy tensor_from_proto left to its caller: `bytes` of `from` into `to`'s data. `to` holds
/// the tensor's storage, so the copy stays safe if the tensor is dropped before it runs (a
/// second initializer of the same name replaces the first: found by the model fuzz target).
struct PendingCopy {
  Tensor to;
  const void* from;
  size_t bytes;
};

/// The copies tensor_from_proto leaves to the loader, and the external data files they read
/// from: each file mapped once (however many tensors it holds) and kept mapped until the
/// copies have run.
struct DeferredCopies {
  std::vector<PendingCopy> copies;
  /// resolved path -> its mapping (shared with the tensors that live in it)
  std::map<std::string, std::shared_ptr<MappedFile>> external;
  /// External tensors at offsets aligned to their element size stay in the file's
  /// copy-on-write mapping instead of being copied (LoadOptions::map_external_data).
  bool map_in_place = false;
};

/// TensorProto -> Tensor. External data is read from under `base_dir`; `what` names the
/// tensor in error messages. `raw_data`, when given, stands for the proto's raw_data field
/// (cut out before parsing, graph/initializer_spans.h) and is copied once into the tensor.
/// With `defer`, the copies of raw and external bytes are left there for the caller (after
/// checks and allocation, the copy is all that is left: the loader runs them on several
/// threads; torch.onnx's default export keeps every weight in external data).
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& what,
                         std::optional<std::string_view> raw_data = std::nullopt,
                         DeferredCopies* defer = nullptr);
/// Tensor -> TensorProto (raw_data, sub-byte types packed).
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);

ValueType value_type_from_proto(const onnx::TypeProto& p);
void value_type_to_proto(const ValueType& t, onnx::TypeProto* p);

/// Reads `path` under `base_dir`, refusing locations that leave it (absolute paths, `..`,
/// links pointing outside).
std::string resolve_external_path(const std::string& base_dir, const std::string& location,
                                  const std::string& what);

}  // namespace onyx
