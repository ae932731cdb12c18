// Graph fusions (inference/fusions_matmul.cpp): each rewrite fires where it should, not where it
// should not, and leaves the results equal to the unfused graph.
#include <gtest/gtest.h>

#include "test_util.h"

namespace onyx {
namespace {

/// Deterministic values 0.1*((i*7) % 13) - 0.6 for a tensor of `shape`.
template <typename T>
Tensor ramp(const Shape& shape) {
  std::vector<T> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::is_floating_point_v<T> ? static_cast<T>(0.1 * double((i * 7) % 13) - 0.6)
                                       : static_cast<T>(int64_t((i * 7) % 13) - 6);
  return Tensor::from_vector<T>(shape, v);
}

/// Runs a model built by `build` at opt level `level`; returns its outputs and nodes run.
std::pair<NamedTensors, size_t> run_at(const std::function<void(test::ModelBuilder&)>& build,
                                       OptLevel level, const NamedTensors& feeds) {
  test::ModelBuilder b(17);
  build(b);
  SessionOptions opts;
  opts.opt_level = level;
  Session s = b.session(opts);
  RunStats stats;
  NamedTensors out = s.run(feeds, {}, &stats);
  return {out, stats.nodes_run};
}

void expect_same(const NamedTensors& got, const NamedTensors& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).dtype(), t.dtype()) << name;
    EXPECT_EQ(got.at(name).shape(), t.shape()) << name;
    test::expect_near(got.at(name), t.to_double_vector(), tol);
  }
}

TEST(FuseTransposeIntoMatMul, TransposedWeightIsReadInPlace) {
  // y = x[2,3,4] x transpose(w[5,4]); w is an input, so nothing folds it away.
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 4});
    b.input("w", DataType::Float, Shape{5, 4});
    b.node("Transpose", {"w"}, {"wt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"x", "wt"}, {"y"});
    b.output("y");
  };
  NamedTensors feeds{{"x", ramp<float>({2, 3, 4})}, {"w", ramp<float>({5, 4})}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
  EXPECT_EQ(plain_nodes, 2u);
  EXPECT_EQ(fused_nodes, 1u);
  expect_same(fused, plain, 1e-6);
  // Spot check against the definition: y[1,2,3] = sum_k x[1,2,k] * w[3,k].
  const float* x = feeds["x"].data<float>();
  const float* w = feeds["w"].data<float>();
  double want = 0;
  for (int k = 0; k < 4; ++k) want += double(x[(1 * 3 + 2) * 4 + k]) * w[3 * 4 + k];
  EXPECT_NEAR(fused["y"].data<float>()[(1 * 3 + 2) * 5 + 3], want, 1e-6);
}

TEST(FuseTransposeIntoMatMul, BatchedTransposedAAndIntegers) {
  for (DataType dt : {DataType::Float, DataType::Int32}) {
    auto build = [dt](test::ModelBuilder& b) {
      b.input("a", dt, Shape{2, 4, 3});  // transposed to [2, 3, 4]
      b.input("c", dt, Shape{2, 5, 4});  // transposed to [2, 4, 5]
      b.node("Transpose", {"a"}, {"at"}).attrs["perm"] = test::attr_ints("perm", {0, 2, 1});
      b.node("Transpose", {"c"}, {"ct"}).attrs["perm"] = test::attr_ints("perm", {0, 2, 1});
      b.node("MatMul", {"at", "ct"}, {"y"});
      b.output("y");
    };
    NamedTensors feeds = dt == DataType::Float
                             ? NamedTensors{{"a", ramp<float>({2, 4, 3})}, {"c", ramp<float>({2, 5, 4})}}
                             : NamedTensors{{"a", ramp<int32_t>({2, 4, 3})},
                                            {"c", ramp<int32_t>({2, 5, 4})}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
    EXPECT_EQ(plain_nodes, 3u);
    EXPECT_EQ(fused_nodes, 1u) << dtype_name(dt);
    EXPECT_EQ(fused["y"].shape(), (Shape{2, 3, 5}));
    expect_same(fused, plain, dt == DataType::Float ? 1e-6 : 0.0);
  }
}

TEST(FuseTransposeIntoMatMul, LeavesOtherPermutationsAndSharedTransposes) {
  // perm [1, 0, 2] moves a batch axis: not a last-two swap, so no fusion.
  auto other_perm = [](test::ModelBuilder& b) {
    b.input("a", DataType::Float, Shape{3, 2, 4});
    b.input("w", DataType::Float, Shape{4, 5});
    b.node("Transpose", {"a"}, {"at"}).attrs["perm"] = test::attr_ints("perm", {1, 0, 2});
    b.node("MatMul", {"at", "w"}, {"y"});
    b.output("y");
  };
  NamedTensors feeds{{"a", ramp<float>({3, 2, 4})}, {"w", ramp<float>({4, 5})}};
  auto [plain, plain_nodes] = run_at(other_perm, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(other_perm, OptLevel::Extended, feeds);
  EXPECT_EQ(fused_nodes, plain_nodes);
  expect_same(fused, plain, 0.0);

  // The transposed value is also an output: the MatMul fuses, the Transpose stays for it.
  auto shared = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{3, 4});
    b.input("w", DataType::Float, Shape{5, 4});
    b.node("Transpose", {"w"}, {"wt"});  // default perm: reversed axes, a swap at rank 2
    b.node("MatMul", {"x", "wt"}, {"y"});
    b.output("y").output("wt");
  };
  NamedTensors feeds2{{"x", ramp<float>({3, 4})}, {"w", ramp<float>({5, 4})}};
  auto [p2, p2_nodes] = run_at(shared, OptLevel::Basic, feeds2);
  auto [f2, f2_nodes] = run_at(shared, OptLevel::Extended, feeds2);
  EXPECT_EQ(f2_nodes, 2u);
  expect_same(f2, p2, 1e-6);
}

TEST(FusedMatMul, ComMicrosoftOpFromAModel) {
  // What ONNX Runtime writes into optimized models: alpha * A x B^T.
  test::ModelBuilder b(17, "com.microsoft");
  b.input("a", DataType::Float, Shape{2, 3});
  b.input("b", DataType::Float, Shape{4, 3});
  Node& n = b.node("FusedMatMul", {"a", "b"}, {"y"}, "com.microsoft");
  n.attrs["transB"] = test::attr_int("transB", 1);
  n.attrs["alpha"] = test::attr_float("alpha", 0.5f);
  b.output("y");
  Session s = b.session();
  Tensor a = ramp<float>({2, 3}), w = ramp<float>({4, 3});
  Tensor y = s.run({{"a", a}, {"b", w}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += double(a.data<float>()[i * 3 + k]) * w.data<float>()[j * 3 + k];
      want.push_back(0.5 * acc);
    }
  test::expect_near(y, want, 1e-6);

  test::ModelBuilder bad(17, "com.microsoft");
  bad.input("a", DataType::Float, Shape{2, 3});
  bad.input("b", DataType::Float, Shape{3, 4});
  bad.node("FusedMatMul", {"a", "b"}, {"y"}, "com.microsoft").attrs["transBatchA"] =
      test::attr_int("transBatchA", 1);
  bad.output("y");
  EXPECT_THROW(bad.session(), NotImplemented);
}

}  // namespace
}  // namespace onyx
