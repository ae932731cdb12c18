// TensorScatter (KV-cache writes) and CausalConvWithState (stateful depthwise causal conv)
// against hand-computed values, plus bad inputs.
#include <cmath>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_int;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::Named;
using onyx::test::run_op;
using onyx::test::T_;

namespace {

// Cache [batch 2, length 3, width 1]; each row writes two values.
const Tensor kPast = T_({2, 3, 1}, {0, 0, 0, 0, 0, 0});
const Tensor kUpdate = T_({2, 2, 1}, {1, 2, 3, 4});

TEST(TensorScatter, LinearWritesAtEachRowsIndex) {
  auto y =
      run_op("TensorScatter",
             {{"past", kPast}, {"upd", kUpdate}, {"idx", T_<int64_t>({2}, {1, 0})}}, {}, 1, 24);
  expect_near(y.at("y0"), {0, 1, 2, 3, 4, 0});
}

TEST(TensorScatter, OmittedIndicesWriteAtZero) {
  auto y =
      run_op("TensorScatter",
             {{"past", T_({1, 1, 3, 2}, {9, 9, 9, 9, 9, 9})}, {"upd", T_({1, 1, 1, 2}, {5, 6})}},
             {attr_int("axis", 2)}, 1, 24);
  expect_near(y.at("y0"), {5, 6, 9, 9, 9, 9});
}

TEST(TensorScatter, CircularWrapsAround) {
  auto y = run_op("TensorScatter",
                  {{"past", kPast}, {"upd", kUpdate}, {"idx", T_<int64_t>({2}, {0, 2})}},
                  {attr_string("mode", "circular")}, 1, 24);
  // Row 1 writes positions 2 and 3 % 3 = 0.
  expect_near(y.at("y0"), {1, 2, 0, 4, 0, 3});
}

TEST(TensorScatter, LinearOverflowIsAnError) {
  EXPECT_THROW(
      run_op("TensorScatter",
             {{"past", kPast}, {"upd", kUpdate}, {"idx", T_<int64_t>({2}, {2, 0})}}, {}, 1, 24),
      Error);
  EXPECT_THROW(
      run_op("TensorScatter", {{"past", kPast}, {"upd", T_({2, 4, 1}, std::vector<double>(8, 1))}},
             {}, 1, 24),
      Error);
}

// Two channels, k = 2, one step of past state: padded rows are [10, 1, 2, 3] and
// [20, 4, 5, 6]; weights [1, 1] and [2, -1]; bias [0.5, 0].
const Named kConvInputs = {{"x", T_({1, 2, 3}, {1, 2, 3, 4, 5, 6})},
                           {"w", T_({2, 1, 2}, {1, 1, 2, -1})},
                           {"b", T_({2}, {0.5, 0})},
                           {"past", T_({1, 2, 1}, {10, 20})}};
const std::vector<double> kConvOut = {11.5, 3.5, 5.5, 36, 3, 4};

TEST(CausalConvWithState, BiasAndPastState) {
  auto y = run_op("CausalConvWithState", kConvInputs, {}, 2, 27);
  expect_near(y.at("y0"), kConvOut);
  expect_near(y.at("y1"), {3, 6});
}

TEST(CausalConvWithState, SiluAndZeroPastState) {
  auto y = run_op("CausalConvWithState",
                  {{"x", T_({1, 1, 3}, {1, -2, 3})}, {"w", T_({1, 1, 3}, {1, 2, 3})}},
                  {attr_string("activation", "silu")}, 2, 27);
  // Padded [0, 0, 1, -2, 3]: conv = [3, 2 * 1 + 3 * -2, 1 - 4 + 9] = [3, -4, 6].
  std::vector<double> want;
  for (double c : {3.0, -4.0, 6.0}) want.push_back(c / (1 + std::exp(-c)));
  expect_near(y.at("y0"), want);
  expect_near(y.at("y1"), {-2, 3});
}

TEST(CausalConvWithState, Float16MatchesFloat) {
  Named half;
  for (const auto& [n, t] : kConvInputs)
    half.push_back({n, T_<float16>(t.shape(), t.to_double_vector())});
  auto y = run_op("CausalConvWithState", half, {}, 2, 27);
  EXPECT_EQ(y.at("y0").dtype(), DataType::Float16);
  expect_near(y.at("y0"), kConvOut, 1e-2);
}

TEST(CausalConvWithState, BadWeightShapeIsAnError) {
  EXPECT_THROW(run_op("CausalConvWithState",
                      {{"x", T_({1, 2, 3}, {1, 2, 3, 4, 5, 6})}, {"w", T_({3, 1, 1}, {1, 1, 1})}},
                      {}, 2, 27),
               Error);
  EXPECT_THROW(
      run_op("CausalConvWithState", kConvInputs, {attr_string("activation", "relu")}, 2, 27),
      Error);
}

}  // namespace
