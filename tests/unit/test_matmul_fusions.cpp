// Graph fusions (inference/fusions_matmul.cpp): each rewrite fires where it should, not where it
// should not, and leaves the results equal to the unfused graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "graph/onnx_io.h"
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

// A tied embedding: the weight is gathered for the input and read transposed by the output
// product. Constant folding must leave the Transpose for the fusion (one copy of the weight, read
// in place by FusedMatMul) rather than add a transposed second copy; without the fusion (basic
// level) the Transpose is folded as before. Same results either way.
TEST(FuseTransposeIntoMatMul, ATransposedConstantWeightIsNotCopiedByFolding) {
  auto build = [](test::ModelBuilder& b) {
    b.input("ids", DataType::Int64, Shape{2});
    b.input("x", DataType::Float, Shape{2, 3, 4});
    b.initializer("w", ramp<float>({5, 4}));
    b.node("Gather", {"w", "ids"}, {"e"});
    b.node("Transpose", {"w"}, {"wt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"x", "wt"}, {"y"});
    b.output("e");
    b.output("y");
  };
  NamedTensors feeds{{"ids", Tensor::from_vector<int64_t>({2}, {4, 1})},
                     {"x", ramp<float>({2, 3, 4})}};
  std::map<OptLevel, NamedTensors> outs;
  for (OptLevel level : {OptLevel::Basic, OptLevel::Extended}) {
    test::ModelBuilder b(17);
    build(b);
    SessionOptions opts;
    opts.opt_level = level;
    Session s = b.session(opts);
    const Graph& g = *s.model().graph;
    std::vector<std::string> ops;
    for (const Node* n : g.topological_order()) ops.push_back(n->op_type);
    std::sort(ops.begin(), ops.end());
    if (level == OptLevel::Basic) {
      EXPECT_EQ(g.initializers.size(), 2u);  // w and its folded transpose
      EXPECT_EQ(ops, (std::vector<std::string>{"Gather", "MatMul"}));
    } else {
      EXPECT_EQ(g.initializers.size(), 1u);  // w alone
      EXPECT_EQ(ops, (std::vector<std::string>{"FusedMatMul", "Gather"}));
    }
    outs[level] = s.run(feeds);
  }
  expect_same(outs[OptLevel::Extended], outs[OptLevel::Basic], 1e-6);
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

TEST(FuseTransposeIntoMatMul, TransposedProductsAndTransposesOfTransposes) {
  // What training graphs of torch's Linear hold: Wt = Transpose(W) read by the forward MatMul
  // and, through the gradient's own Transpose, by dX's product; dW = Transpose(x^T * dY), the
  // gradient of that Transpose. Every Transpose goes; the products read their operands in place.
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, Shape{2, 3, 4});
    b.input("w", DataType::Float, Shape{5, 4});
    b.input("dy", DataType::Float, Shape{6, 5});
    b.input("x2", DataType::Float, Shape{6, 4});
    b.node("Transpose", {"w"}, {"wt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"x", "wt"}, {"y"});
    b.node("Transpose", {"wt"}, {"wtt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"dy", "wtt"}, {"dx"});  // dY * W: through two Transposes
    auto& gemm = b.node("Gemm", {"x2", "dy"}, {"dwt"});  // x2^T * dY = dWt [4, 5]
    gemm.attrs["transA"] = test::attr_int("transA", 1);
    gemm.attrs["alpha"] = test::attr_float("alpha", 0.5f);
    b.node("Transpose", {"dwt"}, {"dw"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.input("a", DataType::Float, Shape{2, 3, 4});
    b.input("c", DataType::Float, Shape{2, 4, 5});
    b.node("MatMul", {"a", "c"}, {"ac"});  // batched: (A C)^T = C^T A^T per batch
    b.node("Transpose", {"ac"}, {"act"}).attrs["perm"] = test::attr_ints("perm", {0, 2, 1});
    b.output("y").output("dx").output("dw").output("act");
  };
  NamedTensors feeds{{"x", ramp<float>({2, 3, 4})}, {"w", ramp<float>({5, 4})},
                     {"dy", ramp<float>({6, 5})},   {"x2", ramp<float>({6, 4})},
                     {"a", ramp<float>({2, 3, 4})}, {"c", ramp<float>({2, 4, 5})}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
  EXPECT_EQ(plain_nodes, 8u);
  EXPECT_EQ(fused_nodes, 4u);  // the four products, no Transpose
  EXPECT_EQ(fused["dw"].shape(), (Shape{5, 4}));
  EXPECT_EQ(fused["act"].shape(), (Shape{2, 5, 3}));
  expect_same(fused, plain, 1e-6);
}

TEST(FuseTransposeIntoMatMul, LeavesTransposedProductsItCannotSwap) {
  // A Gemm with C (C would need its own transpose), a product also read elsewhere, and a
  // MatMul of a 1-D operand keep their Transpose.
  auto build = [](test::ModelBuilder& b) {
    b.input("a", DataType::Float, Shape{3, 4});
    b.input("w", DataType::Float, Shape{4, 5});
    b.input("c", DataType::Float, Shape{3, 5});
    b.input("v", DataType::Float, Shape{4});
    b.input("m", DataType::Float, Shape{2, 3, 4});
    b.node("Gemm", {"a", "w", "c"}, {"g"});
    b.node("Transpose", {"g"}, {"gt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"a", "w"}, {"p"});
    b.node("Transpose", {"p"}, {"pt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.node("MatMul", {"m", "v"}, {"mv"});  // [2, 3]
    b.node("Transpose", {"mv"}, {"mvt"}).attrs["perm"] = test::attr_ints("perm", {1, 0});
    b.output("gt").output("pt").output("p").output("mvt");
  };
  NamedTensors feeds{{"a", ramp<float>({3, 4})}, {"w", ramp<float>({4, 5})},
                     {"c", ramp<float>({3, 5})}, {"v", ramp<float>({4})},
                     {"m", ramp<float>({2, 3, 4})}};
  auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
  auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
  EXPECT_EQ(fused_nodes, plain_nodes);
  expect_same(fused, plain, 0.0);
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


/// `t`'s values in dtype `dt` (float16, bfloat16 or double).
Tensor as_dtype(const Tensor& t, DataType dt) {
  const std::vector<double> v = t.to_double_vector();
  if (dt == DataType::Float16) return test::T_<float16>(t.shape(), v);
  if (dt == DataType::BFloat16) return test::T_<bfloat16>(t.shape(), v);
  return test::T_<double>(t.shape(), v);
}

/// act(x[r, :] . w[:, j] + bias[j]) in double: the definition the fused node must meet.
std::vector<double> linear_reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                                     const std::string& act) {
  const std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector(),
                            bv = bias.to_double_vector();
  const int64_t k = w.dim(0), n = w.dim(1), rows = x.numel() / k;
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double v = bv[j];
      for (int64_t i = 0; i < k; ++i) v += xv[r * k + i] * wv[i * n + j];
      if (act == "Relu") v = std::max(v, 0.0);
      if (act == "Gelu") v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      if (act == "GeluTanh")
        v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      out.push_back(v);
    }
  return out;
}

// nn.Linear on a 3-D activation exports as MatMul + Add (not Gemm); with the activation after
// it the three become one ai.onyx FusedMatMulBias whose oneDNN epilogue adds the bias.
/// A session over `build`'s model loaded as a file is (types inferred, as fusions need), at
/// `level`.
Session loaded_at(const std::function<void(test::ModelBuilder&)>& build, OptLevel level) {
  test::ModelBuilder b(17);
  build(b);
  std::string bytes = serialize_model(*b.build());
  SessionOptions opts;
  opts.opt_level = level;
  opts.intra_op_threads = 2;
  return Session::from_bytes(bytes.data(), bytes.size(), opts);
}

// torch's scaled_dot_product_attention export: q * sqrt(scale) times Transpose(k) *
// sqrt(scale), and a hand-written graph's scores / sqrt(d). The scales become the product's
// alpha and the Transpose is then read in place: one FusedMatMul, results within rounding.
TEST(FuseScaleIntoMatMul, ScaledOperandsScaledProductAndTheTransposeBehind) {
  auto build = [](test::ModelBuilder& b) {
    b.input("q", DataType::Float, Shape{2, 3, 4, 8});
    b.input("k", DataType::Float, Shape{2, 3, 5, 8});
    b.initializer("s", Tensor::from_vector<float>({1}, {0.59460355f}));
    b.initializer("d", Tensor::from_vector<float>({}, {2.0f}));
    b.node("Mul", {"q", "s"}, {"qs"});
    b.node("Transpose", {"k"}, {"kt"}).attrs["perm"] = test::attr_ints("perm", {0, 1, 3, 2});
    b.node("Mul", {"s", "kt"}, {"kts"});
    b.node("MatMul", {"qs", "kts"}, {"scores"});
    b.node("Div", {"scores", "d"}, {"y"});
    b.output("y");
  };
  NamedTensors feeds{{"q", ramp<float>({2, 3, 4, 8})}, {"k", ramp<float>({2, 3, 5, 8})}};
  Session plain = loaded_at(build, OptLevel::Basic);
  Session fused = loaded_at(build, OptLevel::Extended);
  EXPECT_EQ(plain.model().graph->num_nodes(), 5u);
  EXPECT_EQ(test::op_counts(fused), (std::map<std::string, int>{{"com.microsoft:FusedMatMul", 1}}));
  for (const Node* n : fused.model().graph->topological_order()) {
    EXPECT_NEAR(n->attr_float("alpha", 1.0f), 0.59460355f * 0.59460355f / 2.0f, 1e-7);
    EXPECT_EQ(n->attr_int("transB", 0), 1);
  }
  expect_same(fused.run(feeds), plain.run(feeds), 1e-6);
}

// Left alone: a scaled operand read elsewhere too, a per-column scale (not one element), a
// scale whose rank would broadcast the operand up, a product by a constant weight, and an
// integer product. Results are the same either way.
TEST(FuseScaleIntoMatMul, LeavesScalesItCannotMove) {
  auto build = [](test::ModelBuilder& b) {
    b.input("a", DataType::Float, Shape{3, 4});
    b.input("b", DataType::Float, Shape{4, 5});
    b.input("i", DataType::Int32, Shape{3, 4});
    b.input("j", DataType::Int32, Shape{4, 5});
    b.initializer("s", Tensor::from_vector<float>({}, {0.5f}));
    b.initializer("cols", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
    b.initializer("s3", Tensor::from_vector<float>({1, 1, 1}, {0.25f}));
    b.initializer("w", ramp<float>({4, 5}));
    b.initializer("is", Tensor::from_vector<int32_t>({}, {2}));
    b.node("Mul", {"a", "s"}, {"as"});
    b.node("MatMul", {"as", "b"}, {"y1"});
    b.node("Relu", {"as"}, {"y2"});  // a second reader of as
    b.node("Mul", {"a", "cols"}, {"ac"});
    b.node("MatMul", {"ac", "b"}, {"y3"});
    b.node("Mul", {"a", "s3"}, {"a3"});  // [1, 3, 4]: the product would be 3-D
    b.node("MatMul", {"a3", "b"}, {"y4"});
    b.node("MatMul", {"a", "w"}, {"aw"});
    b.node("Mul", {"aw", "s"}, {"y5"});
    b.node("Mul", {"i", "is"}, {"is2"});
    b.node("MatMul", {"is2", "j"}, {"y6"});
    for (const char* y : {"y1", "y2", "y3", "y4", "y5", "y6"}) b.output(y);
  };
  NamedTensors feeds{{"a", ramp<float>({3, 4})}, {"b", ramp<float>({4, 5})},
                     {"i", ramp<int32_t>({3, 4})}, {"j", ramp<int32_t>({4, 5})}};
  Session plain = loaded_at(build, OptLevel::Basic);
  Session fused = loaded_at(build, OptLevel::Extended);
  auto ops = test::op_counts(fused);
  EXPECT_EQ(ops["com.microsoft:FusedMatMul"], 0);
  EXPECT_EQ(ops[":Mul"], 5);
  NamedTensors got = fused.run(feeds), want = plain.run(feeds);
  EXPECT_EQ(got.at("y4").shape(), (Shape{1, 3, 5}));
  expect_same(got, want, 1e-6);
}

TEST(FuseBiasIntoMatMul, LinearAndActivationBecomeOneNode) {
  // {activation op, its domain, approximate attribute, opset}
  struct Case { std::string act, domain, approx; int64_t opset; };
  for (const Case& c : std::vector<Case>{{"", "", "", 17},
                                         {"Relu", "", "", 17},
                                         {"Gelu", "com.microsoft", "", 17},
                                         {"Gelu", "", "none", 20},
                                         {"Gelu", "", "tanh", 20}}) {
    for (bool bias_first : {false, true}) {
      for (const Shape& x_shape : {Shape{2, 3, 8}, Shape{1, 8}}) {  // [1, 8]: one-row path
        SCOPED_TRACE(c.act + " " + c.domain + " " + c.approx + (bias_first ? " bias+y" : " y+bias") +
                     " x " + shape_str(x_shape));
        Tensor w = ramp<float>({8, 6}), bias = test::random_normal({6}, 3);
        auto build = [&](test::ModelBuilder& b) {
          b.input("x", DataType::Float, x_shape);
          b.initializer("w", w).initializer("bias", bias);
          b.node("MatMul", {"x", "w"}, {"y"});
          b.node("Add", bias_first ? std::vector<std::string>{"bias", "y"}
                                   : std::vector<std::string>{"y", "bias"},
                 {c.act.empty() ? "out" : "z"});
          if (!c.act.empty()) {
            Node& a = b.node(c.act, {"z"}, {"out"}, c.domain);
            if (!c.approx.empty()) a.attrs["approximate"] = test::attr_string("approximate", c.approx);
          }
          b.output("out");
        };
        auto run = [&](OptLevel level) {
          test::ModelBuilder b(c.opset, c.domain);
          build(b);
          SessionOptions opts;
          opts.opt_level = level;
          Session s = b.session(opts);
          RunStats stats;
          NamedTensors out = s.run({{"x", ramp<float>(x_shape)}}, {}, &stats);
          return std::pair{out, stats.nodes_run};
        };
        auto [plain, plain_nodes] = run(OptLevel::Basic);
        auto [fused, fused_nodes] = run(OptLevel::Extended);
        EXPECT_EQ(plain_nodes, c.act.empty() ? 2u : 3u);
        EXPECT_EQ(fused_nodes, 1u);
        expect_same(fused, plain, 1e-5);
        const std::string act = c.approx == "tanh" ? "GeluTanh" : c.act;
        test::expect_near(fused.at("out"), linear_reference(ramp<float>(x_shape), w, bias, act), 1e-5);
      }
    }
  }
}

TEST(FuseBiasIntoMatMul, LeavesWhatIsNotARowBiasOrIsReadElsewhere) {
  // {bias shape, MatMul output also a graph output, activation output read twice}
  struct Case { Shape bias; bool y_out, act_shared; size_t nodes; };
  for (const Case& c : std::vector<Case>{{{3, 6}, false, false, 3},   // a per-row matrix
                                         {{1, 1, 6}, false, false, 1}, // [1, 1, N] is a row bias
                                         {{6}, true, false, 3},        // y is also an output
                                         {{6}, false, true, 2}}) {     // Relu's input read twice
    SCOPED_TRACE(shape_str(c.bias) + (c.y_out ? " y out" : "") + (c.act_shared ? " shared" : ""));
    Tensor w = ramp<float>({8, 6}), bias = test::random_normal(c.bias, 5);
    auto build = [&](test::ModelBuilder& b) {
      b.input("x", DataType::Float, Shape{2, 3, 8});
      b.initializer("w", w).initializer("bias", bias);
      b.node("MatMul", {"x", "w"}, {"y"});
      b.node("Add", {"y", "bias"}, {"z"});
      b.node("Relu", {"z"}, {"out"});
      b.output("out");
      if (c.y_out) b.output("y");
      if (c.act_shared) {
        b.node("Neg", {"z"}, {"nz"});
        b.output("nz");
      }
    };
    NamedTensors feeds{{"x", ramp<float>({2, 3, 8})}};
    auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
    auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
    EXPECT_EQ(fused_nodes, c.nodes + (c.act_shared ? 1 : 0));
    expect_same(fused, plain, 1e-6);
  }
}

// nn.Linear on 2-D input exports as Gemm(transB 1) with C the bias; with the activation after
// it both become FusedMatMulBias. Gemms that are not a product plus a row bias stay.
TEST(FuseBiasIntoMatMul, GemmWithARowBiasAndItsActivation) {
  // {C shape, transA, alpha, beta, activation, nodes after the fusion}
  struct Case { Shape c; int64_t trans_a; float alpha, beta; std::string act; size_t nodes; };
  for (const Case& c : std::vector<Case>{{{6}, 0, 1.f, 1.f, "Relu", 1},
                                         {{1, 6}, 0, 1.f, 1.f, "", 1},
                                         {{3, 6}, 0, 1.f, 1.f, "Relu", 2},  // C per row
                                         {{6}, 1, 1.f, 1.f, "Relu", 2},     // transA
                                         {{6}, 0, 0.5f, 1.f, "Relu", 2},    // alpha
                                         {{6}, 0, 1.f, 2.f, "Relu", 2}}) {  // beta
    for (int64_t trans_b : {0, 1}) {
      SCOPED_TRACE(shape_str(c.c) + " transA " + std::to_string(c.trans_a) + " alpha " +
                   std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + " " + c.act +
                   " transB " + std::to_string(trans_b));
      const Shape x_shape = c.trans_a ? Shape{8, 3} : Shape{3, 8};
      const Tensor w = ramp<float>(trans_b ? Shape{6, 8} : Shape{8, 6});
      const Tensor bias = test::random_normal(c.c, 4);
      auto build = [&](test::ModelBuilder& b) {
        b.input("x", DataType::Float, x_shape);
        b.initializer("w", w).initializer("c", bias);
        Node& g = b.node("Gemm", {"x", "w", "c"}, {c.act.empty() ? "out" : "z"});
        g.attrs["transA"] = test::attr_int("transA", c.trans_a);
        g.attrs["transB"] = test::attr_int("transB", trans_b);
        g.attrs["alpha"] = test::attr_float("alpha", c.alpha);
        g.attrs["beta"] = test::attr_float("beta", c.beta);
        if (!c.act.empty()) b.node(c.act, {"z"}, {"out"});
        b.output("out");
      };
      NamedTensors feeds{{"x", ramp<float>(x_shape)}};
      auto [plain, plain_nodes] = run_at(build, OptLevel::Basic, feeds);
      auto [fused, fused_nodes] = run_at(build, OptLevel::Extended, feeds);
      EXPECT_EQ(plain_nodes, c.act.empty() ? 1u : 2u);
      EXPECT_EQ(fused_nodes, c.nodes);
      expect_same(fused, plain, 1e-5);
    }
  }
}

TEST(FusedMatMulBias, SixteenBitAndDoubleAndBadInputs) {
  for (DataType dt : {DataType::BFloat16, DataType::Float16, DataType::Double}) {
    SCOPED_TRACE(dtype_name(dt));
    test::ModelBuilder b(17, "ai.onyx");
    b.input("x", dt, Shape{4, 5, 16});
    b.input("w", dt, Shape{16, 24});
    b.input("bias", dt, Shape{24});
    b.node("FusedMatMulBias", {"x", "w", "bias"}, {"y"}, "ai.onyx").attrs["activation"] =
        test::attr_string("activation", "gelu");
    b.output("y");
    Session s = b.session();
    Tensor x = as_dtype(test::random_normal({4, 5, 16}, 1, 0.5f), dt);
    Tensor w = as_dtype(test::random_normal({16, 24}, 2, 0.5f), dt);
    Tensor bias = as_dtype(test::random_normal({24}, 3), dt);
    Tensor y = s.run({{"x", x}, {"w", w}, {"bias", bias}}).at("y");
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.shape(), (Shape{4, 5, 24}));
    const double tol = dt == DataType::BFloat16 ? 5e-2 : dt == DataType::Float16 ? 5e-3 : 1e-12;
    test::expect_near(y, linear_reference(x, w, bias, "Gelu"), tol);
  }

  // A bias that is not [N], and an unknown activation: errors naming what was found.
  test::ModelBuilder bad(17, "ai.onyx");
  bad.input("x", DataType::Float, Shape{2, 4});
  bad.input("w", DataType::Float, Shape{4, 3});
  bad.input("bias", DataType::Float, Shape{4});
  bad.node("FusedMatMulBias", {"x", "w", "bias"}, {"y"}, "ai.onyx");
  bad.output("y");
  Session s = bad.session();
  test::expect_error(
      [&] {
        s.run({{"x", ramp<float>({2, 4})}, {"w", ramp<float>({4, 3})}, {"bias", ramp<float>({4})}});
      },
      "bias of float [3]");
  test::ModelBuilder bad_act(17, "ai.onyx");
  bad_act.input("x", DataType::Float, Shape{2, 4});
  bad_act.input("w", DataType::Float, Shape{4, 3});
  bad_act.input("bias", DataType::Float, Shape{3});
  bad_act.node("FusedMatMulBias", {"x", "w", "bias"}, {"y"}, "ai.onyx").attrs["activation"] =
      test::attr_string("activation", "swish");
  bad_act.output("y");
  test::expect_error([&] { bad_act.session(); }, "found 'swish'");
}

}  // namespace
}  // namespace onyx
