// Reading and writing ONNX files: models (ModelProto) and tensors (TensorProto,
// SequenceProto, OptionalProto .pb files as the ONNX test corpus stores them).
#pragma once

#include <memory>
#include <string>

#include "graph/ir.h"

namespace onyx {

struct LoadOptions {
  /// Inline model-local functions into the graph (done before anything else looks at it).
  bool inline_functions = true;
  /// Check the graph (producers, cycles, opsets, arity, types) after loading.
  bool validate = true;
  /// Leave external-data tensors (at offsets aligned to their element size, as torch.onnx and
  /// onnx.save_model write them) in a copy-on-write mapping of their
  /// file instead of copying them (as ONNX Runtime and OpenVINO do): no second copy of the
  /// weights, no new pages, and what packs them reads the file's pages. A write to such a
  /// tensor copies its page, never the file. The file must then not be truncated or rewritten
  /// while the model or a session made from it lives (reading a truncated mapping is SIGBUS):
  /// export to a new path, or load with this off.
  bool map_external_data = true;
};

/// Loads a model file; external data is resolved against the file's folder.
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts = {});
/// Loads a serialized ModelProto. External data, if any, is resolved against `base_dir`
/// ("" refuses external data).
std::unique_ptr<Model> load_model_from_bytes(const void* data, size_t size,
                                             const std::string& base_dir = "",
                                             const LoadOptions& opts = {});
/// Serializes the model; all tensors are written inline (raw_data).
std::string serialize_model(const Model& model);
void save_model(const Model& model, const std::string& path);
/// A deep copy (through serialization, without re-validation; keeps base_dir).
std::unique_ptr<Model> clone_model(const Model& model);

/// Reads a serialized TensorProto (e.g. test_data_set_0/input_0.pb).
Tensor load_tensor_pb(const std::string& path);
/// Reads a .pb holding a TensorProto, SequenceProto or OptionalProto, as `kind` says
/// ("tensor", "sequence", "optional").
Datum load_datum_pb(const std::string& path, const std::string& kind);
/// Serializes one tensor as a TensorProto named `name`.
std::string serialize_tensor(const Tensor& t, const std::string& name = "");

}  // namespace onyx
