// CPU reductions and friends (Reduce*, ArgMax/ArgMin, Softmax family, TopK, CumSum, Einsum,
// LpNormalization, MeanVarianceNormalization) against hand-computed values, plus the
// bad-input errors they raise.
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;

namespace {

/// Runs one `op` node on inputs in0, in1, ... (empty tensor = omitted input); outputs y0...
NamedTensors run_node(const std::string& op, const std::vector<Tensor>& inputs,
                      std::vector<Attribute> attrs = {}, int outputs = 1, int64_t opset = 21) {
  ModelBuilder b(opset);
  std::vector<std::string> ins, outs;
  NamedTensors feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back("");
      continue;
    }
    const std::string name = fmt::format("in{}", i);
    b.input(name, inputs[i].dtype(), inputs[i].shape());
    feeds[name] = inputs[i];
    ins.push_back(name);
  }
  for (int i = 0; i < outputs; ++i) outs.push_back(fmt::format("y{}", i));
  onyx::test::set_attrs(b.node(op, ins, outs), std::move(attrs));
  for (const auto& o : outs) b.output(o);
  return b.session().run(feeds);
}

Tensor y0(const std::string& op, const std::vector<Tensor>& inputs,
          std::vector<Attribute> attrs = {}, int64_t opset = 21) {
  return run_node(op, inputs, std::move(attrs), 1, opset).at("y0");
}

Tensor iota_f(const Shape& shape, float start = 0.f) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), start);
  return Tensor::from_vector<float>(shape, v);
}
Tensor f32(const Shape& shape, std::vector<float> v) { return Tensor::from_vector<float>(shape, v); }
Tensor i64(const Shape& shape, std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(shape, v); }

using onyx::test::expect_error;

const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST(Reduce, SumInnerAndOuterAxes) {
  Tensor inner = y0("ReduceSum", {iota_f({2, 3}), i64({1}, {1})});
  EXPECT_EQ(inner.shape(), (Shape{2, 1}));
  expect_near(inner, {3, 12});
  Tensor outer = y0("ReduceSum", {iota_f({2, 3}), i64({1}, {0})}, {attr_int("keepdims", 0)});
  EXPECT_EQ(outer.shape(), (Shape{3}));
  expect_near(outer, {3, 5, 7});
  Tensor all = y0("ReduceSum", {iota_f({2, 3})}, {attr_int("keepdims", 0)});
  EXPECT_EQ(all.shape(), (Shape{}));
  expect_near(all, {15});
}

TEST(Reduce, MeanOverNonContiguousAxes) {
  // x[a,b,c] = 6a + 2b + c; the mean over a and c is 2b + 3.5.
  Tensor y = y0("ReduceMean", {iota_f({2, 3, 2}), i64({2}, {0, -1})});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 1}));
  expect_near(y, {3.5, 5.5, 7.5});
}

TEST(Reduce, MaxMinProdAndFriends) {
  Tensor x = f32({2, 2}, {1, -4, 3, 2});
  Tensor ax = i64({1}, {1});
  expect_near(y0("ReduceMax", {x, ax}), {1, 3});
  expect_near(y0("ReduceMin", {x, ax}), {-4, 2});
  expect_near(y0("ReduceProd", {x, ax}), {-4, 6});
  expect_near(y0("ReduceL1", {x, ax}), {5, 5});
  expect_near(y0("ReduceL2", {x, ax}), {std::sqrt(17.0), std::sqrt(13.0)});
  expect_near(y0("ReduceSumSquare", {x, ax}), {17, 13});
  expect_near(y0("ReduceLogSum", {f32({2}, {1, 2})}), {std::log(3.0)});
  // Stable for inputs whose exp overflows.
  expect_near(y0("ReduceLogSumExp", {f32({2}, {1000, 1000})}), {1000 + std::log(2.0)}, 1e-3);
}

TEST(Reduce, EmptySetFollowsReference) {
  Tensor x = Tensor::zeros(DataType::Float, {2, 0, 4});
  Tensor ax = i64({1}, {1});
  Tensor mx = y0("ReduceMax", {x, ax});
  EXPECT_EQ(mx.shape(), (Shape{2, 1, 4}));
  for (double v : mx.to_double_vector()) EXPECT_EQ(v, -kInf);
  for (double v : y0("ReduceSum", {x, ax}).to_double_vector()) EXPECT_EQ(v, 0);
  for (double v : y0("ReduceProd", {x, ax}).to_double_vector()) EXPECT_EQ(v, 1);
  for (double v : y0("ReduceLogSum", {x, ax}).to_double_vector()) EXPECT_EQ(v, -kInf);
}

TEST(Reduce, NoopWithEmptyAxes) {
  Tensor x = f32({2, 2}, {1, -2, 3, 4});
  Tensor empty_axes = i64({0}, {});
  Tensor id = y0("ReduceSum", {x, empty_axes}, {attr_int("noop_with_empty_axes", 1)});
  EXPECT_EQ(id.shape(), (Shape{2, 2}));
  expect_near(id, {1, -2, 3, 4});
  expect_near(y0("ReduceSumSquare", {x, empty_axes}, {attr_int("noop_with_empty_axes", 1)}),
              {1, 4, 9, 16});
  expect_near(y0("ReduceSum", {x, empty_axes}, {attr_int("keepdims", 0)}), {6});
}

TEST(Reduce, IntegerAndHalfTypes) {
  Tensor xi = Tensor::from_vector<int32_t>({2, 2}, {7, 2, -3, 4});
  Tensor p = y0("ReduceProd", {xi, i64({1}, {0})});
  EXPECT_EQ(p.dtype(), DataType::Int32);
  expect_near(p, {-21, 8});
  expect_near(y0("ReduceMean", {xi, i64({1}, {1})}), {4, 0});  // integer division
  // 4096 ones: a float16 accumulator would stop at 2048.
  std::vector<float16> ones(4096, float16(1.0f));
  Tensor h = y0("ReduceSum", {Tensor::from_vector<float16>({4096}, ones)});
  EXPECT_EQ(h.dtype(), DataType::Float16);
  expect_near(h, {4096});
  Tensor b = Tensor::from_vector<bool>({2, 2}, {false, true, false, false});
  expect_near(y0("ReduceMax", {b, i64({1}, {1})}), {1, 0});
  expect_near(y0("ReduceMin", {b, i64({1}, {0})}), {0, 0});
}

// Integer sums and products that pass the type wrap around (two's complement, as numpy and
// ONNX Runtime give) instead of overflowing a signed accumulator (undefined); CumSum too.
TEST(Reduce, IntegerOverflowWrapsAround) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const Tensor big = i64({3}, {int64_t{1} << 40, int64_t{1} << 40, 3});
  EXPECT_EQ(y0("ReduceProd", {big}).to_int64_vector(), (std::vector<int64_t>{0}));  // 3 * 2^80 mod 2^64
  EXPECT_EQ(y0("ReduceSum", {i64({2}, {kMax, 2})}).to_int64_vector(), (std::vector<int64_t>{kMin + 1}));
  EXPECT_EQ(y0("ReduceL1", {i64({1}, {kMin})}).to_int64_vector(), (std::vector<int64_t>{kMin}));
  EXPECT_EQ(y0("ReduceSumSquare", {i64({1}, {int64_t{1} << 32})}).to_int64_vector(),
            (std::vector<int64_t>{0}));
  const Tensor xi = Tensor::from_vector<int32_t>({3}, {INT32_MAX, 1, 1});
  EXPECT_EQ(y0("CumSum", {xi, i64({}, {0})}).to_int64_vector(),
            (std::vector<int64_t>{INT32_MAX, INT32_MIN, INT32_MIN + 1}));
  const Tensor cols = Tensor::from_vector<int32_t>({3, 2}, {INT32_MAX, 0, 1, 0, 1, 0});
  EXPECT_EQ(y0("CumSum", {cols, i64({}, {0})}).to_int64_vector(),
            (std::vector<int64_t>{INT32_MAX, 0, INT32_MIN, 0, INT32_MIN + 1, 0}));
}

TEST(Reduce, ArgMaxArgMin) {
  Tensor x = f32({4}, {1, 3, 3, 2});
  Tensor first = y0("ArgMax", {x}, {attr_int("keepdims", 0)});
  EXPECT_EQ(first.dtype(), DataType::Int64);
  expect_near(first, {1});
  expect_near(y0("ArgMax", {x}, {attr_int("select_last_index", 1)}), {2});
  // Column path: along axis 0 of a 3x2 matrix.
  Tensor m = f32({3, 2}, {5, 1, 2, 1, 7, 0});
  Tensor amin = y0("ArgMin", {m}, {attr_int("axis", 0)});
  EXPECT_EQ(amin.shape(), (Shape{1, 2}));
  expect_near(amin, {1, 2});
  expect_near(y0("ArgMin", {m}, {attr_int("axis", 0), attr_int("select_last_index", 1)}), {1, 2});
  expect_near(y0("ArgMax", {m}, {attr_int("axis", -1), attr_int("keepdims", 0)}), {0, 0, 0});
}

TEST(Softmax, AlongAxisAndCoerced2D) {
  Tensor x = f32({2, 3}, {1, 2, 3, 0, 0, 0});
  const double e = std::exp(1.0), z = 1 + e + e * e;
  expect_near(y0("Softmax", {x}), {1 / z, e / z, e * e / z, 1. / 3, 1. / 3, 1. / 3});
  // opset 13, axis 0 of [2,2,2]: each (j,k) column normalised over i.
  Tensor c = y0("Softmax", {f32({2, 2, 2}, {0, 1, 2, 3, 0, 1, 2, 3})}, {attr_int("axis", 0)});
  expect_near(c, {.5, .5, .5, .5, .5, .5, .5, .5});
  // opset 11 coerces [2,2,2] at axis 1 into rows of 4.
  Tensor r = y0("Softmax", {f32({2, 2, 2}, {0, 0, 0, 0, 1, 1, 1, 1})}, {}, 11);
  expect_near(r, {.25, .25, .25, .25, .25, .25, .25, .25});
  Tensor ls = y0("LogSoftmax", {f32({1, 2}, {1000, 1000})});
  expect_near(ls, {-std::log(2.0), -std::log(2.0)}, 1e-4);
}

TEST(Softmax, HardmaxPicksFirstMaximum) {
  expect_near(y0("Hardmax", {f32({2, 3}, {1, 3, 3, 0, -1, 0})}), {0, 1, 0, 1, 0, 0});
  expect_near(y0("Hardmax", {f32({2, 2}, {1, 3, 2, 2})}, {attr_int("axis", 0)}), {0, 1, 1, 0});
}

TEST(TopK, LargestSmallestAndTies) {
  Tensor x = f32({2, 4}, {1, 4, 4, 2, 0, -1, 5, -1});
  NamedTensors out = run_node("TopK", {x, i64({1}, {2})}, {}, 2);
  EXPECT_EQ(out.at("y0").shape(), (Shape{2, 2}));
  expect_near(out.at("y0"), {4, 4, 5, 0});
  expect_near(out.at("y1"), {1, 2, 2, 0});
  out = run_node("TopK", {x, i64({1}, {2})}, {attr_int("largest", 0)}, 2);
  expect_near(out.at("y0"), {1, 2, -1, -1});
  expect_near(out.at("y1"), {0, 3, 1, 3});
  out = run_node("TopK", {x, i64({1}, {1})}, {attr_int("axis", 0)}, 2);
  expect_near(out.at("y0"), {1, 4, 5, 2});
  expect_near(out.at("y1"), {0, 0, 1, 0});
}

TEST(CumSum, ExclusiveAndReverse) {
  Tensor x = f32({4}, {1, 2, 3, 4});
  Tensor axis = i64({}, {0});
  expect_near(y0("CumSum", {x, axis}), {1, 3, 6, 10});
  expect_near(y0("CumSum", {x, axis}, {attr_int("exclusive", 1)}), {0, 1, 3, 6});
  expect_near(y0("CumSum", {x, axis}, {attr_int("reverse", 1)}), {10, 9, 7, 4});
  expect_near(y0("CumSum", {x, axis}, {attr_int("exclusive", 1), attr_int("reverse", 1)}),
              {9, 7, 4, 0});
  Tensor m = Tensor::from_vector<int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_near(y0("CumSum", {m, Tensor::from_vector<int32_t>({1}, {0})}), {1, 2, 3, 5, 7, 9});
}

TEST(Einsum, ContractionsDiagonalsAndEllipsis) {
  Tensor a = iota_f({2, 3}), b = iota_f({3, 2});
  auto eins = [](const std::string& eq, const std::vector<Tensor>& in) {
    return y0("Einsum", in, {attr_string("equation", eq)});
  };
  // [[0,1,2],[3,4,5]] x [[0,1],[2,3],[4,5]]
  expect_near(eins("ij,jk->ik", {a, b}), {10, 13, 28, 40});
  Tensor implicit = eins("ij,jk", {a, b});
  EXPECT_EQ(implicit.shape(), (Shape{2, 2}));
  expect_near(implicit, {10, 13, 28, 40});
  expect_near(eins("ij->ji", {a}), {0, 3, 1, 4, 2, 5});
  expect_near(eins("ij->", {a}), {15});
  Tensor sq = iota_f({3, 3});
  expect_near(eins("ii", {sq}), {12});
  expect_near(eins("ii->i", {sq}), {0, 4, 8});
  Tensor batched = eins("bij,bjk->bik", {iota_f({2, 1, 2}), iota_f({2, 2, 1})});
  EXPECT_EQ(batched.shape(), (Shape{2, 1, 1}));
  expect_near(batched, {1, 13});  // [0,1].[0,1] and [2,3].[2,3]
  Tensor ell = eins("...ij->...ji", {iota_f({2, 1, 2})});
  EXPECT_EQ(ell.shape(), (Shape{2, 2, 1}));
  expect_near(ell, {0, 1, 2, 3});
  // Broadcast ellipsis dims: [2,1,2] x [2,1] -> [2,1] per batch.
  Tensor bc = eins("...j,j->...", {iota_f({2, 2}), f32({2}, {1, 10})});
  expect_near(bc, {10, 32});
  expect_near(eins("ij,jk,kl->il", {a, b, f32({2, 1}, {1, 1})}), {23, 68});
  // Large enough for the oneDNN path.
  Tensor big = eins("ik,kj->ij", {Tensor::from_vector<float>({40, 40}, std::vector<float>(1600, 1.f)),
                                  Tensor::from_vector<float>({40, 40}, std::vector<float>(1600, 2.f))});
  for (double v : big.to_double_vector()) ASSERT_EQ(v, 80);
}

TEST(Normalization, LpAndMeanVariance) {
  Tensor x = f32({2, 2}, {3, 4, 0, 0});
  expect_near(y0("LpNormalization", {x}), {.6, .8, 0, 0});
  expect_near(y0("LpNormalization", {x}, {attr_int("p", 1), attr_int("axis", 0)}), {1, 1, 0, 0});
  // axes {0, 2, 3} on [1, 2, 1, 2]: each channel normalised over its two values.
  Tensor m = y0("MeanVarianceNormalization", {f32({1, 2, 1, 2}, {1, 3, 10, 10})});
  expect_near(m, {-1, 1, 0, 0}, 1e-6);
}

TEST(ReduceErrors, BadInputsNameTheNode) {
  expect_error([] { y0("ReduceSum", {iota_f({2, 3}), i64({1}, {2})}); }, "axis 2 is out of range");
  expect_error([] { y0("ReduceMean", {iota_f({2, 3}), i64({2}, {1, -1})}); }, "twice");
  expect_error([] { run_node("TopK", {iota_f({2, 3}), i64({1}, {4})}, {}, 2); },
               "K should be in [0, 3]");
  expect_error([] { y0("Einsum", {iota_f({2, 3})}, {attr_string("equation", "ijk->i")}); },
               "rank 2");
  expect_error(
      [] { y0("Einsum", {iota_f({2, 3}), iota_f({2, 3})}, {attr_string("equation", "ij,jk")}); },
      "label 'j'");
  expect_error([] { y0("CumSum", {iota_f({3}), f32({1}, {0})}); }, "int32 or int64");
}
