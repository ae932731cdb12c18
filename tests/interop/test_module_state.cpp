// Which initializers an OnnxModule makes torch parameters and buffers, and how their names nest
// (interop/module_state.h), on small graphs built in code.
#include <gtest/gtest.h>

#include "graph/error.h"
#include "graph/shape_inference.h"
#include "interop/module_state.h"

namespace onyx::torch {
namespace {

/// x [N, 4] -> MatMul "fc.weight" -> Add "fc.bias" -> BatchNormalization (scale "bn.weight",
/// bias "bn.bias", stats "bn.running_mean" / "bn.running_var") -> Where(Equal("mask", 0), 0, .)
/// -> y. "mask" is float but only read through Equal; "unused" is read by nothing.
std::unique_ptr<Model> bn_model() {
  auto model = std::make_unique<Model>();
  model->ir_version = 8;
  model->opsets = {{"", 17}};
  model->graph = std::make_unique<Graph>("bn");
  Graph& g = *model->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(4)});
  g.inputs.push_back(x);
  auto vec = [](int64_t n, float v) { return Tensor::from_vector<float>({n}, std::vector<float>(n, v)); };
  Value* w = g.add_initializer("fc.weight", Tensor::from_vector<float>({4, 4}, std::vector<float>(16, 0.5f)));
  Value* b = g.add_initializer("fc.bias", vec(4, 0.f));
  Value* scale = g.add_initializer("bn.weight", vec(4, 1.f));
  Value* shift = g.add_initializer("bn.bias", vec(4, 0.f));
  Value* mean = g.add_initializer("bn.running_mean", vec(4, 0.f));
  Value* var = g.add_initializer("bn.running_var", vec(4, 1.f));
  Value* mask = g.add_initializer("mask", vec(4, 1.f));
  g.add_initializer("unused", vec(4, 1.f));
  Value* zero = g.add_initializer("zero", Tensor::scalar<float>(0.f));
  Value* hb = g.get_or_add_value("hb");
  Value* n = g.get_or_add_value("n");
  Value* off = g.get_or_add_value("off");
  Value* y = g.get_or_add_value("y");
  g.add_node("Add", {g.get_or_add_value("xw"), b}, {hb});
  g.add_node("MatMul", {x, w}, {g.get_or_add_value("xw")});
  g.add_node("BatchNormalization", {hb, scale, shift, mean, var}, {n});
  g.add_node("Equal", {mask, zero}, {off});
  g.add_node("Where", {off, zero, n}, {y});
  g.outputs.push_back(y);
  infer_types_and_shapes(*model);
  return model;
}

TEST(ModuleState, BatchNormStatisticsAreBuffersAndParametersReachAnOutputAlongFloats) {
  auto m = bn_model();
  ModuleState s = choose_module_state(*m, {});
  // First-use order along the graph (the MatMul runs before the Add that is listed first);
  // "mask" only reaches y through Equal's bool output, "unused" reaches nothing, "zero" is 0-d.
  EXPECT_EQ(s.parameters, (std::vector<std::string>{"fc.weight", "fc.bias", "bn.weight", "bn.bias"}));
  EXPECT_EQ(s.buffers, (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
}

TEST(ModuleState, ExplicitTrainableListIsKeptAndMayNotNameABuffer) {
  auto m = bn_model();
  ModuleState s = choose_module_state(*m, {"fc.bias", "mask"});
  EXPECT_EQ(s.parameters, (std::vector<std::string>{"fc.bias", "mask"}));
  EXPECT_EQ(s.buffers, (std::vector<std::string>{"bn.running_mean", "bn.running_var"}));
  try {
    choose_module_state(*m, {"bn.running_var"});
    FAIL() << "a running statistic was accepted as trainable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bn.running_var' is a BatchNormalization running statistic"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModuleState, DottedNamesNestAsTorchNestsThem) {
  TorchName a = split_torch_name("h.0.ln_1.weight");
  EXPECT_EQ(a.modules, (std::vector<std::string>{"h", "0", "ln_1"}));
  EXPECT_EQ(a.leaf, "weight");
  TorchName b = split_torch_name("onnx::MatMul_282");
  EXPECT_TRUE(b.modules.empty());
  EXPECT_EQ(b.leaf, "onnx::MatMul_282");
  for (const char* bad : {"a..b", ".a", "a.", ""}) {
    try {
      split_torch_name(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("empty component"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace onyx::torch
