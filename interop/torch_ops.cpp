#include "interop/torch_ops.h"

#include <torch/custom_class.h>
#include <torch/library.h>

#include "interop/onnx_module.h"

namespace onyx::torch {

ScriptModel::ScriptModel(const std::string& path) : module(std::make_shared<OnnxModule>(path)) {}
ScriptModel::~ScriptModel() = default;

namespace {

std::vector<at::Tensor> run(c10::intrusive_ptr<ScriptModel> model, at::TensorList inputs) {
  return model->module->forward(inputs.vec());
}

}  // namespace

}  // namespace onyx::torch

// Static registration is what TORCH_LIBRARY is for: loading the library is how a C++ or
// TorchScript program asks for these. (onyx_interop is an object library, so no linker drops
// this file; see interop/CMakeLists.txt.)
TORCH_LIBRARY(onyx, m) {
  using onyx::torch::ScriptModel;
  using Self = c10::intrusive_ptr<ScriptModel>;
  m.class_<ScriptModel>("Model")
      .def(::torch::init<std::string>())
      .def("forward", [](const Self& self, std::vector<at::Tensor> inputs) { return self->module->forward(inputs); })
      .def("parameters", [](const Self& self) { return self->module->parameters(); })
      .def("parameter_names", [](const Self& self) { return self->module->parameter_names(); })
      .def("input_names", [](const Self& self) { return self->module->input_names(); })
      .def("output_names", [](const Self& self) { return self->module->output_names(); })
      .def("train", [](const Self& self, bool on) { self->module->train(on); })
      .def("is_training", [](const Self& self) { return self->module->is_training(); });
  m.def("run(__torch__.torch.classes.onyx.Model model, Tensor[] inputs) -> Tensor[]", &onyx::torch::run);
}
