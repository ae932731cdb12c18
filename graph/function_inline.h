// Inlining of model-local functions (ModelProto.functions) into the graph, on the protobuf
// level so the rest of onyx never sees a function call.
#pragma once

#include <onnx/onnx_pb.h>

namespace onyx {

/// Replaces every call of a model-local function (in the main graph and in subgraphs,
/// recursively, nested calls too) by the function's body with fresh value names and the
/// caller's attributes substituted. Adds the functions' opset imports the model lacks.
void inline_local_functions(onnx::ModelProto& model);

}  // namespace onyx
