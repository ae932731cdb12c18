// The TORCH_LIBRARY(onyx) registrations (interop/torch_ops.cpp), made when libonyx_torch.so
// loads (torch.ops.load_library in Python, or linking onyx::torch in C++):
//
//   class torch.classes.onyx.Model(str path)        an ONNX model with torch parameters
//       .forward(Tensor[] inputs) -> Tensor[]        differentiable, like OnnxModule::forward
//       .parameters() -> Tensor[]                    the trainable parameters (for an optimizer)
//       .parameter_names() -> str[], .input_names() -> str[], .output_names() -> str[]
//       .train(bool on), .is_training() -> bool
//   op onyx::run(__torch__.torch.classes.onyx.Model model, Tensor[] inputs) -> Tensor[]
//
// onyx::run has one kernel for every dispatch key (CompositeImplicitAutograd): it runs
// OnnxModule::forward, whose autograd node records the call, so the op is differentiable with
// respect to the model's parameters and float inputs. From C++:
//
//   auto model = c10::make_intrusive<onyx::torch::ScriptModel>("mlp.onnx");
//   auto op = c10::Dispatcher::singleton().findSchemaOrThrow("onyx::run", "")
//                 .typed<onyx::torch::RunSignature>();
//   std::vector<at::Tensor> y = op.call(model, {x});
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

namespace onyx::torch {

class OnnxModule;

/// torch.classes.onyx.Model: an OnnxModule behind TorchScript's custom-class interface.
struct ScriptModel : ::torch::CustomClassHolder {
  /// Loads an ONNX file with the default OnnxModuleOptions.
  explicit ScriptModel(const std::string& path);
  ~ScriptModel() override;
  std::shared_ptr<OnnxModule> module;
};

/// The C++ signature of onyx::run, for c10::Dispatcher's typed calls.
using RunSignature = std::vector<at::Tensor>(c10::intrusive_ptr<ScriptModel>, at::TensorList);

}  // namespace onyx::torch
