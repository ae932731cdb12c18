// TORCH_LIBRARY(onyx) (interop/torch_ops.h) through c10's dispatcher, as a C++ extension or a
// TorchScript program reaches it: the custom class torch.classes.onyx.Model and the op onyx::run,
// typed and boxed, inference and differentiable.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <torch/custom_class.h>

#include "interop/onnx_module.h"
#include "interop/torch_ops.h"
#include "torch_data.h"

namespace onyx::torch::test {
namespace {

c10::TypedOperatorHandle<RunSignature> run_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("onyx::run", "").typed<RunSignature>();
}

TEST(TorchOps, LibraryRegistersTheModelClassAndTheRunOp) {
  const auto& schema = c10::Dispatcher::singleton().findSchemaOrThrow("onyx::run", "").schema();
  std::ostringstream s;
  s << schema;
  EXPECT_EQ(s.str(), "onyx::run(__torch__.torch.classes.onyx.Model model, Tensor[] inputs) -> Tensor[]");
  auto cls = ::torch::getCustomClass("__torch__.torch.classes.onyx.Model");
  ASSERT_NE(cls, nullptr);
  for (const char* method : {"forward", "parameters", "parameter_names", "input_names", "output_names", "train",
                             "is_training"})
    EXPECT_NE(cls->findMethod(method), nullptr) << method;
}

TEST(TorchOps, RunThroughTheDispatcherEqualsOnnxModule) {
  auto model = c10::make_intrusive<ScriptModel>(torch_data("mlp", "model.onnx"));
  at::Tensor x = load_npy("mlp", "x")[0];
  OnnxModule reference(torch_data("mlp", "model.onnx"));
  const at::Tensor want = reference.forward({x})[0];
  std::vector<at::Tensor> typed = run_op().call(model, {x});
  ASSERT_EQ(typed.size(), 1u);
  EXPECT_TRUE(at::allclose(typed[0], want, 1e-6, 1e-7));
  // Boxed, as TorchScript's interpreter calls it: IValues on a stack.
  ::torch::jit::Stack stack{c10::IValue(model), c10::IValue(std::vector<at::Tensor>{x})};
  c10::Dispatcher::singleton().findSchemaOrThrow("onyx::run", "").callBoxed(&stack);
  ASSERT_EQ(stack.size(), 1u);
  EXPECT_TRUE(at::allclose(stack[0].toTensorVector()[0], want, 1e-6, 1e-7));
}

TEST(TorchOps, RunIsDifferentiableWithRespectToTheModelsParameters) {
  auto model = c10::make_intrusive<ScriptModel>(torch_data("mlp", "model.onnx"));
  at::Tensor x = load_npy("mlp", "x")[0];
  at::Tensor y = run_op().call(model, {x})[0];
  ASSERT_TRUE(y.requires_grad());
  y.pow(2).sum().backward();
  // The same loss on OnnxModule gives the same gradients.
  OnnxModule reference(torch_data("mlp", "model.onnx"));
  reference.forward({x})[0].pow(2).sum().backward();
  const auto mine = model->module->parameters(), theirs = reference.parameters();
  ASSERT_EQ(mine.size(), 4u);
  for (size_t i = 0; i < mine.size(); ++i) {
    ASSERT_TRUE(mine[i].grad().defined()) << model->module->parameter_names()[i];
    EXPECT_TRUE(at::allclose(mine[i].grad(), theirs[i].grad(), 1e-5, 1e-7)) << model->module->parameter_names()[i];
  }
}

TEST(TorchOps, ErrorsFromOnyxCrossTheDispatcherWithTheirMessage) {
  auto model = c10::make_intrusive<ScriptModel>(torch_data("mlp", "model.onnx"));
  at::Tensor x = load_npy("mlp", "x")[0];
  try {
    run_op().call(model, {x, x});
    FAIL() << "two inputs were accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("expected 1 input(s) (x) but got 2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(run_op().call(model, {x}).size(), 1u);  // still usable
}

}  // namespace
}  // namespace onyx::torch::test
