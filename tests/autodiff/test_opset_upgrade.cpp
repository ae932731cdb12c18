// Training models that import ai.onnx opset 7-12 (graph/opset_upgrade.h): the upgraded graph
// computes what the original computes (both run by onyx::Session, whose kernels honour every
// opset), gradients through the upgraded ops pass the finite-difference check, and what has
// no exact opset-13 form is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grad_check.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "graph/opset_upgrade.h"
#include "inference/session.h"

namespace onyx::test {
namespace {

std::unique_ptr<Model> one_node(int64_t opset, const std::string& op, const Shape& in,
                                std::vector<Attribute> attrs, std::vector<Tensor> extra = {}) {
  auto m = std::make_unique<Model>();
  m->ir_version = 7;
  m->opsets.push_back({"", opset});
  m->graph = std::make_unique<Graph>("g");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  SymShape s;
  for (int64_t d : in) s.push_back(Dim::fixed(d));
  x->type = ValueType::tensor(DataType::Float, s);
  g.inputs.push_back(x);
  std::vector<Value*> ins = {x};
  for (size_t i = 0; i < extra.size(); ++i)
    ins.push_back(g.add_initializer(fmt::format("c{}", i), extra[i]));
  Value* y = g.get_or_add_value("y");
  Node* n = g.add_node(op, ins, {y}, "", op);
  for (auto& a : attrs) n->attrs[a.name] = a;
  g.outputs.push_back(y);
  return m;
}

Tensor ramp(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7f * float(i)) * 2.0f;
  return Tensor::from_vector<float>(s, v);
}

// Runs `m` as given and after upgrade_to_opset13; the outputs must agree.
void expect_same_after_upgrade(std::unique_ptr<Model> m, const Shape& in) {
  auto upgraded = clone_model(*m);
  upgrade_to_opset13(*upgraded);
  EXPECT_EQ(upgraded->opset(""), 14);
  SessionOptions so;
  so.opt_level = OptLevel::None;
  NamedTensors feeds{{"x", ramp(in)}};
  auto want = Session(std::move(m), so).run(feeds).at("y");
  auto got = Session(std::move(upgraded), so).run(feeds).at("y");
  ASSERT_EQ(got.shape(), want.shape());
  auto g = got.to_double_vector(), w = want.to_double_vector();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-6) << i;
}

std::vector<std::string> op_types(const Model& m) {
  std::vector<std::string> ops;
  for (const Node* n : m.graph->topological_order()) ops.push_back(n->op_type);
  return ops;
}

}  // namespace

TEST(OpsetUpgrade, SoftmaxFamilyKeepsItsFlattenedMeaning) {
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
    for (int64_t axis : {0, 1, 2, -2}) {
      SCOPED_TRACE(fmt::format("{} axis {}", op, axis));
      expect_same_after_upgrade(one_node(11, op, {2, 3, 4}, {Attribute::of_int("axis", axis)}),
                                {2, 3, 4});
    }
  // The default axis of opset < 13 is 1, not -1.
  expect_same_after_upgrade(one_node(9, "Softmax", {2, 3, 4}, {}), {2, 3, 4});
  // Over the last axis alone both meanings agree: no rewrite, just axis -1.
  auto m = one_node(11, "Softmax", {2, 3, 4}, {Attribute::of_int("axis", 2)});
  upgrade_to_opset13(*m);
  EXPECT_EQ(op_types(*m), std::vector<std::string>{"Softmax"});
  auto f = one_node(11, "Softmax", {2, 3, 4}, {Attribute::of_int("axis", 1)});
  upgrade_to_opset13(*f);
  EXPECT_EQ(op_types(*f).size(), 4u);  // Flatten, Softmax, Shape, Reshape
}

TEST(OpsetUpgrade, AttributesBecomeInputs) {
  expect_same_after_upgrade(
      one_node(11, "ReduceMean", {2, 3, 4}, {Attribute::of_ints("axes", {1}),
                                             Attribute::of_int("keepdims", 0)}),
      {2, 3, 4});
  expect_same_after_upgrade(one_node(10, "Clip", {2, 3}, {Attribute::of_float("min", -0.5),
                                                          Attribute::of_float("max", 0.7)}),
                            {2, 3});
  expect_same_after_upgrade(one_node(11, "Squeeze", {2, 1, 3}, {Attribute::of_ints("axes", {1})}),
                            {2, 1, 3});
  expect_same_after_upgrade(
      one_node(9, "Slice", {4, 5}, {Attribute::of_ints("starts", {1, 0}),
                                    Attribute::of_ints("ends", {3, 4}),
                                    Attribute::of_ints("axes", {0, 1})}),
      {4, 5});
}

TEST(OpsetUpgrade, UpsampleAndResize10) {
  auto scales = Tensor::from_vector<float>({4}, {1, 1, 2, 3});
  expect_same_after_upgrade(
      one_node(9, "Upsample", {1, 2, 3, 2}, {Attribute::of_string("mode", "nearest")}, {scales}),
      {1, 2, 3, 2});
  expect_same_after_upgrade(
      one_node(9, "Upsample", {1, 2, 3, 2}, {Attribute::of_string("mode", "linear")}, {scales}),
      {1, 2, 3, 2});
  expect_same_after_upgrade(
      one_node(10, "Resize", {1, 2, 3, 2}, {Attribute::of_string("mode", "nearest")}, {scales}),
      {1, 2, 3, 2});
  expect_same_after_upgrade(
      one_node(7, "Upsample", {1, 2, 3, 2},
               {Attribute::of_string("mode", "nearest"), Attribute::of_floats("scales", {1, 1, 2, 2})}),
      {1, 2, 3, 2});
  // Legacy nearest downsampling rounds up, which opset 13 cannot state.
  auto shrink = one_node(10, "Resize", {1, 2, 4, 4}, {Attribute::of_string("mode", "nearest")},
                         {Tensor::from_vector<float>({4}, {1, 1, 0.5f, 0.5f})});
  try {
    upgrade_to_opset13(*shrink);
    ADD_FAILURE() << "nearest downsampling of Resize-10 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rounds up"), std::string::npos) << e.what();
  }
}

TEST(OpsetUpgrade, RefusesWhatHasNoOpset13Form) {
  auto old = one_node(6, "Relu", {2}, {});
  try {
    upgrade_to_opset13(*old);
    ADD_FAILURE() << "opset 6 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opset 6"), std::string::npos) << e.what();
  }
  auto m = one_node(7, "BatchNormalization", {2, 3, 4},
                    {Attribute::of_int("spatial", 0)},
                    {Tensor::from_vector<float>({3}, {1, 1, 1}), Tensor::from_vector<float>({3}, {0, 0, 0}),
                     Tensor::from_vector<float>({3}, {0, 0, 0}), Tensor::from_vector<float>({3}, {1, 1, 1})});
  try {
    upgrade_to_opset13(*m);
    ADD_FAILURE() << "spatial=0 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spatial=0"), std::string::npos) << e.what();
  }
}

// Gradients through the upgraded graph against central differences of the same graph.
TEST(OpsetUpgrade, GradientsOfOldOpsetOps) {
  check_gradient({.op = "Softmax", .inputs = {P("x", {2, 3, 4}, -2, 2)},
                  .attrs = {attr_int("axis", 1)}, .opset = 11});
  check_gradient({.op = "LogSoftmax", .inputs = {P("x", {2, 3, 4}, -2, 2)}, .opset = 9});
  check_gradient({.op = "ReduceMean", .inputs = {P("x", {2, 3, 4})},
                  .attrs = {attr_ints("axes", {0, 2})}, .opset = 11});
  check_gradient({.op = "Squeeze", .inputs = {P("x", {2, 1, 3})},
                  .attrs = {attr_ints("axes", {1})}, .opset = 11});
}

// An opset-9 classifier gets a training graph at opset 14 (it used to be refused); that it
// learns is tests/training's TrainingSession.Opset9ModelTrains.
TEST(OpsetUpgrade, Opset9ModelGetsATrainingGraph) {
  auto m = std::make_unique<Model>();
  m->ir_version = 4;
  m->opsets.push_back({"", 9});
  m->graph = std::make_unique<Graph>("mlp9");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(4)});
  g.inputs.push_back(x);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 0.5f);
  std::vector<float> w(4 * 3), b(3, 0);
  for (float& v : w) v = nd(rng);
  Value* W = g.add_initializer("W", Tensor::from_vector<float>({4, 3}, w));
  Value* B = g.add_initializer("B", Tensor::from_vector<float>({3}, b));
  Value* h = g.get_or_add_value("h");
  g.add_node("Gemm", {x, W, B}, {h}, "", "gemm");
  Value* y = g.get_or_add_value("y");
  g.add_node("Relu", {h}, {y}, "", "relu");
  g.outputs.push_back(y);
  autodiff::LossSpec spec;
  spec.kind = "softmax_cross_entropy";
  auto tg = autodiff::build_training_graph(*m, spec, {});
  EXPECT_EQ(tg.model->opset(""), 14);
  EXPECT_EQ(tg.params, (std::vector<std::string>{"B", "W"}));
}

}  // namespace onyx::test

namespace onyx::test {

// A model that imports only another domain (ai.onnx.ml here) has nothing to upgrade; it gets
// the ai.onnx import the loss and gradient nodes need instead of "imports ai.onnx opset 0".
TEST(OpsetUpgrade, ModelWithoutAnAiOnnxImportGetsOne) {
  auto m = one_node(1, "Binarizer", {2, 3}, {});
  m->opsets = {{"ai.onnx.ml", 3}};
  m->graph->nodes()[0]->domain = "ai.onnx.ml";
  upgrade_to_opset13(*m);
  EXPECT_EQ(m->opset(""), 14);
  EXPECT_EQ(m->opset("ai.onnx.ml"), 3);
  EXPECT_EQ(op_types(*m), std::vector<std::string>{"Binarizer"});
}

}  // namespace onyx::test
