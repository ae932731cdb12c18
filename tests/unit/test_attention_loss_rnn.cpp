// Attention, RotaryEmbedding, the losses, RNN/GRU/LSTM and the misc NN ops (LRN, Swish,
// SwiGLU, CumProd, Det, random generators) against hand-computed values, plus bad inputs.
#include <cmath>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;
using onyx::test::Named;
using onyx::test::T_;

namespace {

/// One `op` node at opset 24 unless told otherwise (Attention and friends are recent).
NamedTensors run_op(const std::string& op, const Named& inputs, std::vector<Attribute> attrs,
                    int outputs = 1, int64_t opset = 24) {
  return onyx::test::run_op(op, inputs, std::move(attrs), outputs, opset);
}

Attribute attr_strings(const std::string& n, std::vector<std::string> v) {
  Attribute a;
  a.name = n;
  a.type = Attribute::Type::Strings;
  a.strings = std::move(v);
  return a;
}

using onyx::test::expect_error;

const double kE = std::exp(1.0);
// softmax([0, 1]) . [1, 3]
const double kAttn = 1.0 / (1 + kE) + 3.0 * kE / (1 + kE);

TEST(Attention, FourDimensionalFloatAndDouble) {
  auto y = run_op("Attention",
                  {{"q", T_({1, 1, 1, 1}, {1})},
                   {"k", T_({1, 1, 2, 1}, {0, 1})},
                   {"v", T_({1, 1, 2, 1}, {1, 3})}},
                  {});
  expect_near(y.at("y0"), {kAttn});
  y = run_op("Attention",
             {{"q", T_<double>({1, 1, 1, 1}, {1})},
              {"k", T_<double>({1, 1, 2, 1}, {0, 1})},
              {"v", T_<double>({1, 1, 2, 1}, {1, 3})}},
             {});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Double);
  expect_near(y.at("y0"), {kAttn}, 1e-12);
}

TEST(Attention, CausalWithSoftmaxOutput) {
  // Query 0 sees key 0 only; query 1 sees both. Mode 3 returns the probabilities.
  auto y = run_op("Attention",
                  {{"q", T_({1, 1, 2, 1}, {1, 1})},
                   {"k", T_({1, 1, 2, 1}, {0, 1})},
                   {"v", T_({1, 1, 2, 1}, {1, 3})}},
                  {attr_int("is_causal", 1), attr_int("qk_matmul_output_mode", 3)}, 4);
  expect_near(y.at("y0"), {1, kAttn});
  expect_near(y.at("y3"), {1, 0, 1 / (1 + kE), kE / (1 + kE)});
}

TEST(Attention, ThreeDimensionalGroupedHeads) {
  // Two query heads share one KV head: q=1 gives kAttn, q=0 averages V.
  auto y = run_op(
      "Attention",
      {{"q", T_({1, 1, 2}, {1, 0})}, {"k", T_({1, 2, 1}, {0, 1})}, {"v", T_({1, 2, 1}, {1, 3})}},
      {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 1)});
  EXPECT_EQ(y.at("y0").shape(), Shape({1, 1, 2}));
  expect_near(y.at("y0"), {kAttn, 2});
}

TEST(Attention, FullyMaskedRowIsZeroAndCacheConcatenates) {
  Tensor mask = Tensor::from_vector<bool>({1, 2}, {false, false});
  auto y = run_op("Attention",
                  {{"q", T_({1, 1, 1, 1}, {1})},
                   {"k", T_({1, 1, 1, 1}, {1})},
                   {"v", T_({1, 1, 1, 1}, {3})},
                   {"mask", mask},
                   {"pk", T_({1, 1, 1, 1}, {0})},
                   {"pv", T_({1, 1, 1, 1}, {1})}},
                  {}, 3);
  expect_near(y.at("y0"), {0});
  expect_near(y.at("y1"), {0, 1});
  expect_near(y.at("y2"), {1, 3});
}

TEST(Attention, BadInputs) {
  expect_error(
      [] {
        run_op("Attention",
               {{"q", T_({1, 1, 1, 2}, {1, 1})},
                {"k", T_({1, 1, 2, 1}, {0, 1})},
                {"v", T_({1, 1, 2, 1}, {1, 3})}},
               {});
      },
      "head size");
  expect_error(
      [] {
        run_op("Attention",
               {{"q", T_({1, 1, 2}, {1, 0})},
                {"k", T_({1, 2, 1}, {0, 1})},
                {"v", T_({1, 2, 1}, {1, 3})}},
               {});
      },
      "q_num_heads");
}

TEST(RotaryEmbedding, QuarterTurn) {
  // cos = 0, sin = 1: (x1, x2) -> (-x2, x1).
  auto y = run_op(
      "RotaryEmbedding",
      {{"x", T_({1, 1, 1, 2}, {1, 2})}, {"cos", T_({1, 1, 1}, {0})}, {"sin", T_({1, 1, 1}, {1})}},
      {});
  expect_near(y.at("y0"), {-2, 1});
  y = run_op(
      "RotaryEmbedding",
      {{"x", T_({1, 1, 4}, {1, 2, 5, 6})},
       {"cos", T_({3, 1}, {1, 0, 1})},
       {"sin", T_({3, 1}, {0, 1, 0})},
       {"pos", T_<int64_t>({1, 1}, {1})}},
      {attr_int("num_heads", 1), attr_int("interleaved", 1), attr_int("rotary_embedding_dim", 2)});
  expect_near(y.at("y0"), {-2, 1, 5, 6});
}

TEST(Loss, SoftmaxCrossEntropy) {
  const double ln2 = std::log(2.0);
  auto y = run_op("SoftmaxCrossEntropyLoss",
                  {{"x", T_({1, 2}, {0, 0})}, {"t", T_<int64_t>({1}, {1})}}, {}, 2);
  EXPECT_EQ(y.at("y0").shape(), Shape({}));
  expect_near(y.at("y0"), {ln2});
  expect_near(y.at("y1"), {-ln2, -ln2});
}

TEST(Loss, NegativeLogLikelihoodReductions) {
  const Named in = {{"x", T_({2, 2}, {-1, -2, -3, -4})}, {"t", T_<int64_t>({2}, {0, 1})}};
  expect_near(run_op("NegativeLogLikelihoodLoss", in, {attr_string("reduction", "none")}).at("y0"),
              {1, 4});
  expect_near(run_op("NegativeLogLikelihoodLoss", in, {}).at("y0"), {2.5});
  expect_near(run_op("NegativeLogLikelihoodLoss", in, {attr_string("reduction", "sum")}).at("y0"),
              {5});
  Named weighted = in;
  weighted.push_back({"w", T_({2}, {1, 3})});
  expect_near(run_op("NegativeLogLikelihoodLoss", weighted, {}).at("y0"), {13.0 / 4});
  expect_near(run_op("NegativeLogLikelihoodLoss", weighted, {attr_int("ignore_index", 1)}).at("y0"),
              {1});
}

TEST(Loss, TargetOutOfRange) {
  expect_error(
      [] {
        run_op("NegativeLogLikelihoodLoss",
               {{"x", T_({1, 2}, {-1, -2})}, {"t", T_<int64_t>({1}, {5})}}, {});
      },
      "outside [0, 2)");
}

TEST(Rnn, ForwardAndReverse) {
  // h1 = tanh(2 x0 + h0), h2 = tanh(2 x1 + h1) with x = [1, 0].
  const Named in = {
      {"x", T_({2, 1, 1}, {1, 0})}, {"w", T_({1, 1, 1}, {2})}, {"r", T_({1, 1, 1}, {1})}};
  auto y = run_op("RNN", in, {attr_int("hidden_size", 1)}, 2);
  const double h1 = std::tanh(2.0), h2 = std::tanh(h1);
  expect_near(y.at("y0"), {h1, h2});
  expect_near(y.at("y1"), {h2});
  y = run_op("RNN", in, {attr_string("direction", "reverse")}, 2);
  expect_near(y.at("y0"), {std::tanh(2.0), 0});
  expect_near(y.at("y1"), {std::tanh(2.0)});
}

TEST(Rnn, SequenceLensAndBatchwiseLayout) {
  // Batch 1 has length 1: its second step is zero in Y and Y_h keeps step one.
  Named in = {{"x", T_({2, 2, 1}, {1, 0, 1, 0})},  // layout 1: [batch, seq, input]
              {"w", T_({1, 1, 1}, {2})},
              {"r", T_({1, 1, 1}, {1})},
              {"b", Tensor()},
              {"lens", T_<int32_t>({2}, {2, 1})}};
  auto y = run_op("RNN", in, {attr_int("layout", 1)}, 2);
  const double h1 = std::tanh(2.0), h2 = std::tanh(h1);
  EXPECT_EQ(y.at("y0").shape(), Shape({2, 2, 1, 1}));
  expect_near(y.at("y0"), {h1, h2, h1, 0});
  expect_near(y.at("y1"), {h2, h1});
}

TEST(Rnn, GruAndLstmWithZeroWeights) {
  // All gates see 0: GRU gives H = 0.5 h0; LSTM gives C = 0.5 c0, H = 0.5 tanh(C).
  auto gru = run_op("GRU",
                    {{"x", T_({1, 1, 1}, {5})},
                     {"w", T_({1, 3, 1}, {0, 0, 0})},
                     {"r", T_({1, 3, 1}, {0, 0, 0})},
                     {"b", Tensor()},
                     {"lens", Tensor()},
                     {"h0", T_({1, 1, 1}, {2})}},
                    {}, 2);
  expect_near(gru.at("y1"), {1});
  auto lstm = run_op("LSTM",
                     {{"x", T_({1, 1, 1}, {5})},
                      {"w", T_({1, 4, 1}, {0, 0, 0, 0})},
                      {"r", T_({1, 4, 1}, {0, 0, 0, 0})},
                      {"b", Tensor()},
                      {"lens", Tensor()},
                      {"h0", Tensor()},
                      {"c0", T_({1, 1, 1}, {2})}},
                     {attr_strings("activations", {"Sigmoid", "Tanh", "Tanh"})}, 3);
  expect_near(lstm.at("y1"), {0.5 * std::tanh(1.0)});
  expect_near(lstm.at("y2"), {1});
}

TEST(Rnn, BadWeights) {
  expect_error(
      [] {
        run_op("LSTM",
               {{"x", T_({1, 1, 1}, {5})},
                {"w", T_({1, 3, 1}, {0, 0, 0})},
                {"r", T_({1, 4, 1}, {0, 0, 0, 0})}},
               {});
      },
      "W should be");
}

TEST(MiscNn, LrnSwishSwiGlu) {
  auto y = run_op(
      "LRN", {{"x", T_({1, 2, 1, 1}, {1, 2})}},
      {attr_int("size", 2), attr_float("alpha", 1), attr_float("beta", 1), attr_float("bias", 1)});
  expect_near(y.at("y0"), {1 / 3.5, 2 / 3.0});
  expect_near(run_op("Swish", {{"x", T_({2}, {0, 1})}}, {}).at("y0"), {0, 1 / (1 + 1 / kE)});
  expect_near(run_op("SwiGLU", {{"a", T_({1}, {1})}, {"b", T_({1}, {2})}}, {}, 1, 28).at("y0"),
              {2 / (1 + 1 / kE)});
  expect_error(
      [] {
        run_op("SwiGLU", {{"a", T_({1}, {1})}, {"b", T_({2}, {2, 2})}}, {}, 1, 28);
      },
      "no broadcasting");
}

TEST(MiscNn, CumProdAndDet) {
  const Named in = {{"x", T_<int32_t>({4}, {1, 2, 3, 4})}, {"axis", T_<int64_t>({}, {0})}};
  expect_near(run_op("CumProd", in, {}, 1, 26).at("y0"), {1, 2, 6, 24});
  expect_near(
      run_op("CumProd", in, {attr_int("exclusive", 1), attr_int("reverse", 1)}, 1, 26).at("y0"),
      {24, 12, 4, 1});
  auto y = run_op("Det", {{"x", T_({2, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3})}}, {});
  EXPECT_EQ(y.at("y0").shape(), Shape({2}));
  expect_near(y.at("y0"), {-2, 6});
}

TEST(MiscNn, RandomGenerators) {
  auto y = run_op("Bernoulli", {{"p", T_({4}, {0, 1, 0, 1})}}, {attr_float("seed", 3)});
  expect_near(y.at("y0"), {0, 1, 0, 1});
  y = run_op("RandomUniformLike", {{"x", T_<double>({100}, std::vector<double>(100, 0))}},
             {attr_float("low", 2), attr_float("high", 3)});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Double);
  for (double v : y.at("y0").to_double_vector()) EXPECT_TRUE(v >= 2 && v < 3) << v;
}

// Found by tests/fuzz/fuzz_model.cpp: a float seed outside int64's range (-2.7e36) was converted
// to an integer (undefined behaviour); it is an onyx::Error naming the node, as is a NaN seed.
TEST(MiscNn, RandomSeedOutsideTheIntegersIsAnError) {
  for (float seed : {-2.7e36f, std::nanf("")}) {
    try {
      run_op("Bernoulli", {{"p", T_({2}, {0, 1})}}, {attr_float("seed", seed)});
      ADD_FAILURE() << seed << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("Bernoulli node"), std::string::npos) << msg;
      EXPECT_NE(msg.find("attribute 'seed'"), std::string::npos) << msg;
    }
  }
}

}  // namespace
