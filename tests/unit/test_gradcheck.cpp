// Whole-model gradient checks (training/gradient_check.h) and `onyx gradcheck`: a correct
// model passes, a gradient that disagrees with finite differences fails by name (also when one
// element of many is wrong and only a random direction looks at it), nodes without a rule are
// listed before anything runs, and --batch checks a fixed-batch model on fewer samples.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autodiff/training_graph.h"
#include "cli_process.h"
#include "graph/onnx_io.h"
#include "test_util.h"
#include "training/gradient_check.h"

namespace onyx {
namespace {

// Weights N(0, 0.25) unless a scale is given.
Tensor randn(const Shape& s, uint32_t seed, float scale = 0.5f) { return test::random_normal(s, seed, scale); }

// x [N, 6] -> Gemm(w1, b1) -> Tanh -> MatMul(w2) -> Softmax: float32, as users have them.
std::unique_ptr<Model> small_net() {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(6)});
  b.initializer("w1", randn({6, 5}, 1)).initializer("b1", randn({5}, 2));
  b.initializer("w2", randn({5, 3}, 3));
  b.node("Gemm", {"x", "w1", "b1"}, {"h"});
  b.node("Tanh", {"h"}, {"t"});
  b.node("MatMul", {"t", "w2"}, {"z"});
  b.node("Softmax", {"z"}, {"p"});
  b.output("p");
  return b.build();
}

TEST(GradCheck, CorrectModelPasses) {
  auto m = small_net();
  NamedTensors feeds{{"x", randn({4, 6}, 9, 1.0f)}};
  GradCheckReport r = check_model_gradients(*m, feeds, {.elements_per_param = 100});
  ASSERT_EQ(r.params.size(), 3u);
  EXPECT_EQ(r.params[0].name, "b1");
  EXPECT_EQ(r.params[1].checked, 30);  // every element of w1 [6, 5]
  EXPECT_TRUE(r.passed());
  EXPECT_LT(r.worst()->relative_error, 1e-6) << r.worst()->name;
}

// Relu at exactly 0: the rule's subgradient (0) is not what a central difference sees (1/2),
// so the check must fail and name the parameter.
TEST(GradCheck, DisagreementFailsByName) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::fixed(2)});
  b.initializer("w", Tensor::from_vector<float>({2}, {0.0f, 0.0f}));
  b.node("Relu", {"w"}, {"r"});
  b.node("Add", {"r", "x"}, {"y"});
  b.output("y");
  auto m = b.build();
  GradCheckReport r =
      check_model_gradients(*m, {{"x", Tensor::from_vector<float>({2}, {1, 2})}}, {});
  ASSERT_EQ(r.params.size(), 1u);
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.worst()->name, "w");
  EXPECT_GT(r.worst()->relative_error, 0.1);
}

// One random direction checks every element at once: a gradient wrong in 1 element of 1000
// (Relu's subgradient at exactly 0) fails the parameter without sampling that element.
TEST(GradCheck, OneDirectionCatchesOneWrongElement) {
  std::vector<float> w(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f + 0.001f * static_cast<float>(i);
  w[617] = 0.0f;
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::fixed(1000)});
  b.initializer("w", Tensor::from_vector<float>({1000}, w));
  b.node("Relu", {"w"}, {"r"});
  b.node("Mul", {"r", "x"}, {"y"});
  b.output("y");
  auto m = b.build();
  GradCheckReport r = check_model_gradients(*m, {{"x", randn({1000}, 21, 1.0f)}},
                                            {.elements_per_param = 0, .directions = 1});
  ASSERT_EQ(r.params.size(), 1u);
  EXPECT_EQ(r.params[0].directions, 1);
  EXPECT_EQ(r.params[0].checked, 0);
  EXPECT_FALSE(r.passed()) << r.params[0].relative_error;
  EXPECT_GT(r.params[0].relative_error, 10 * r.tolerance);
  // Without the kink the same check passes.
  w[617] = 0.2f;
  m->graph->initializers["w"] = Tensor::from_vector<float>({1000}, w);
  r = check_model_gradients(*m, {{"x", randn({1000}, 21, 1.0f)}}, {.directions = 3});
  EXPECT_TRUE(r.passed()) << r.params[0].relative_error;
  EXPECT_EQ(r.params[0].directions, 3);
}

TEST(GradCheck, MissingRulesAreListedAndRefused) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::fixed(3), Dim::fixed(3)});
  b.initializer("w", randn({3, 3}, 4));
  b.node("Add", {"x", "w"}, {"s"});
  b.node("Det", {"s"}, {"d"});
  b.output("d");
  auto m = b.build();
  auto missing = autodiff::missing_gradients(*m);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].op_type, "Det");
  EXPECT_EQ(missing[0].why, "no gradient rule");
  EXPECT_TRUE(autodiff::missing_gradients(*small_net()).empty());
  try {
    check_model_gradients(*m, {{"x", randn({3, 3}, 5)}}, {});
    ADD_FAILURE() << "a model with a missing rule must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Det"), std::string::npos) << e.what();
  }
}

// What torch.onnx writes for a batch-first bidirectional nn.LSTM with a linear head on the last
// step: x [B, S, 5] -> Transpose -> LSTM -> Transpose -> Reshape [S, B, 8] -> Gather(S - 1)
// -> Gemm. Float32 with symbolic batch and sequence: trainable, and right to 1e-6 in float64.
TEST(GradCheck, TorchStyleBidirectionalLstm) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("B"), Dim::symbol("S"), Dim::fixed(5)});
  b.initializer("W", randn({2, 16, 5}, 11)).initializer("R", randn({2, 16, 4}, 12));
  b.initializer("Bias", randn({2, 32}, 13)).initializer("head_w", randn({3, 8}, 14));
  b.initializer("head_b", randn({3}, 15)).initializer("last", Tensor::scalar<int64_t>(-1));
  b.initializer("shape", Tensor::from_vector<int64_t>({3}, {0, 0, -1}));
  test::set_attrs(b.node("Transpose", {"x"}, {"xt"}), {test::attr_ints("perm", {1, 0, 2})});
  Node& lstm = b.node("LSTM", {"xt", "W", "R", "Bias"}, {"y", "y_h", "y_c"});
  test::set_attrs(lstm, {test::attr_int("hidden_size", 4), test::attr_string("direction", "bidirectional")});
  test::set_attrs(b.node("Transpose", {"y"}, {"yt"}), {test::attr_ints("perm", {0, 2, 1, 3})});
  b.node("Reshape", {"yt", "shape"}, {"seq"});
  b.node("Gather", {"seq", "last"}, {"final"});
  test::set_attrs(b.node("Gemm", {"final", "head_w", "head_b"}, {"logits"}), {test::attr_int("transB", 1)});
  b.output("logits");
  auto m = b.build();
  EXPECT_TRUE(autodiff::missing_gradients(*m).empty());
  GradCheckReport r = check_model_gradients(*m, {{"x", randn({2, 5, 5}, 16, 1.0f)}}, {.elements_per_param = 8});
  ASSERT_EQ(r.params.size(), 5u);
  EXPECT_TRUE(r.passed());
  EXPECT_LT(r.worst()->relative_error, 1e-6) << r.worst()->name;
}

// A float32 model with rotary embeddings (ai.onnx RotaryEmbedding, float-only in ONNX) is
// checked in float64 like any other: onyx's kernel runs double too.
TEST(GradCheck, RotaryEmbeddingModel) {
  std::vector<float> cs, sn;
  for (int p = 0; p < 6; ++p)
    for (int i = 0; i < 2; ++i) {
      cs.push_back(std::cos(0.3f * static_cast<float>(p + 1) / static_cast<float>(i + 1)));
      sn.push_back(std::sin(0.3f * static_cast<float>(p + 1) / static_cast<float>(i + 1)));
    }
  test::ModelBuilder b(23);
  b.input("x", DataType::Float, SymShape{Dim::symbol("B"), Dim::fixed(3), Dim::fixed(8)});
  b.input("pos", DataType::Int64, SymShape{Dim::symbol("B"), Dim::fixed(3)});
  b.initializer("w1", randn({8, 8}, 31)).initializer("w2", randn({8, 3}, 32));
  b.initializer("cos", Tensor::from_vector<float>({6, 2}, cs));
  b.initializer("sin", Tensor::from_vector<float>({6, 2}, sn));
  b.node("MatMul", {"x", "w1"}, {"h"});
  test::set_attrs(b.node("RotaryEmbedding", {"h", "cos", "sin", "pos"}, {"r"}),
                  {test::attr_int("num_heads", 2)});
  b.node("MatMul", {"r", "w2"}, {"y"});
  b.output("y");
  auto m = b.build();
  NamedTensors feeds{{"x", randn({2, 3, 8}, 33, 1.0f)},
                     {"pos", Tensor::from_vector<int64_t>({2, 3}, {0, 1, 2, 5, 3, 4})}};
  GradCheckReport r = check_model_gradients(*m, feeds, {.elements_per_param = 4, .directions = 2});
  ASSERT_EQ(r.params.size(), 2u) << "the caches are not parameters";
  EXPECT_TRUE(r.passed());
  EXPECT_LT(r.worst()->relative_error, 1e-6) << r.worst()->name;
}

class CliGradcheck : public test::CliProcessTest {};

TEST_F(CliGradcheck, PassesListsAndFails) {
  const std::string good = (dir_ / "net.onnx").string();
  save_model(*small_net(), good);
  auto r = onyx("gradcheck " + test::quote(good) + " --dim N=3");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("every node on the path"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradcheck: PASS: 3 parameters"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("w2"), std::string::npos) << r.out;

  // A model exported with a fixed batch of 8, checked on 2 samples (--batch specialises it).
  auto fixed = small_net();
  fixed->graph->find_value("x")->type =
      ValueType::tensor(DataType::Float, SymShape{Dim::fixed(8), Dim::fixed(6)});
  fixed->graph->find_value("p")->type =
      ValueType::tensor(DataType::Float, SymShape{Dim::fixed(8), Dim::fixed(3)});
  const std::string batch8 = (dir_ / "net8.onnx").string();
  save_model(*fixed, batch8);
  r = onyx("gradcheck " + test::quote(batch8) + " --batch 2 --elements 2 --directions 2");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checking on a batch of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradcheck: PASS: 3 parameters, 6 directions, 6 elements"), std::string::npos)
      << r.out;

  r = onyx("gradcheck " + test::quote(good) + " --ops");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("PASS"), std::string::npos) << "--ops runs nothing: " << r.out;

  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::fixed(3), Dim::fixed(3)});
  b.initializer("w", randn({3, 3}, 4));
  b.node("Add", {"x", "w"}, {"s"}).name = "add_w";
  b.node("Det", {"s"}, {"d"}).name = "the_det";
  b.output("d");
  const std::string bad = (dir_ / "det.onnx").string();
  save_model(*b.build(), bad);
  r = onyx("gradcheck " + test::quote(bad) + " --ops");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("the_det (Det): no gradient rule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradcheck: FAIL"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace onyx
