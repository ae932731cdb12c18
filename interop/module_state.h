// Which initializers of an ONNX model an OnnxModule holds as torch parameters and buffers, and
// how their names nest into submodules. Plain graph logic (no libtorch), so it compiles fast
// and is tested without torch's headers.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace onyx::torch {

struct ModuleState {
  /// Trainable initializers, in order of first use in the graph (torch's declaration order for
  /// exported models).
  std::vector<std::string> parameters;
  /// BatchNormalization running means and variances (initializers), in order of first use.
  std::vector<std::string> buffers;
};

/// The buffers are every BatchNormalization's running statistics. The parameters are
/// `trainable` when it is not empty (AutogradSession checks the names), otherwise every float
/// initializer of rank >= 1 that is not a buffer and reaches a graph output along float values
/// (so a mask read through Equal or a shape read through Shape is left in the model).
/// onyx::Error when a trainable name is also a buffer.
ModuleState choose_module_state(const Model& model, const std::vector<std::string>& trainable);

/// How torch nests a dotted name: "h.0.ln_1.weight" -> submodules {"h", "0", "ln_1"} and the
/// leaf "weight". onyx::Error naming the initializer when a component is empty ("a..b", ".a").
struct TorchName {
  std::vector<std::string> modules;
  std::string leaf;
};
TorchName split_torch_name(const std::string& name);

}  // namespace onyx::torch
