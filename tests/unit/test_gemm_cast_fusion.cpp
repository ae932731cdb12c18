// The 16-bit weight gradient's Cast back to float32 (inference/fusions_gemm_cast.cpp) and the
// ai.onyx GemmCast kernel (kernels/cpu/matmul.cpp): in a bf16 training graph each linear
// layer's Cast(Gemm(dY, X, transA = 1), to = FLOAT) becomes one GemmCast writing float32; the
// kernel's output is the float32 accumulator of the 16-bit operands' product (no bf16 rounding
// in between); look-alikes are left alone; bad attributes are refused at session creation.
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/training_graph.h"
#include "graph/autocast.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

const int64_t kFloat = static_cast<int64_t>(DataType::Float);

/// x [batch, 16] -> Gemm(transB) -> Relu -> Gemm(transB) -> y [batch, 8], as torch exports two
/// nn.Linear layers on 2-D input.
std::unique_ptr<Model> two_linears() {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(16)});
  b.initializer("w1", randn({24, 16}, 1, 0.25));
  b.initializer("b1", randn({24}, 2, 0.1));
  b.initializer("w2", randn({8, 24}, 3, 0.2));
  b.initializer("b2", randn({8}, 4, 0.1));
  b.node("Gemm", {"x", "w1", "b1"}, {"h"}).attrs["transB"] = attr_int("transB", 1);
  b.node("Relu", {"h"}, {"hr"});
  b.node("Gemm", {"hr", "w2", "b2"}, {"y"}).attrs["transB"] = attr_int("transB", 1);
  b.output("y");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

struct Step {
  NamedTensors grads;
  std::map<std::string, int> ops;
};

/// One bf16 training step's gradients of every parameter at `level`.
Step bf16_step(OptLevel level) {
  auto m = two_linears();
  autodiff::prepare_for_training(*m);
  infer_types_and_shapes(*m);
  autocast(*m, Precision::BFloat16);
  auto tg = autodiff::build_training_graph(*m, {.kind = "mse", .output = "y"},
                                           {"w1", "b1", "w2", "b2"});
  SessionOptions so;
  so.opt_level = level;
  Session s(std::move(tg.model), so);
  NamedTensors feeds{{"x", randn({12, 16}, 5)}, {"labels", randn({12, 8}, 6)}};
  return {s.run(feeds, tg.grads), op_counts(s)};
}

/// max |got - want| / max |want|.
double relative_error(const Tensor& got, const std::vector<double>& want) {
  auto g = got.to_double_vector();
  EXPECT_EQ(g.size(), want.size());
  double scale = 1e-30, err = 0;
  for (size_t i = 0; i < want.size() && i < g.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    err = std::max(err, std::abs(g[i] - want[i]));
  }
  return err / scale;
}

/// `v` rounded to `dt` (bfloat16 or float16) and back.
double rounded(float v, DataType dt) {
  return dt == DataType::BFloat16 ? double(float(bfloat16(v))) : double(float(float16(v)));
}

}  // namespace

TEST(GemmCastFusion, Bf16WeightGradientsComeFromGemmCast) {
  const Step fused = bf16_step(OptLevel::All), plain = bf16_step(OptLevel::None);
  // dW1 and dW2 (Gemm with transA, no C) are fused; dX of the second layer is a Gemm that no
  // Cast reads, and the biases' gradients are reductions.
  EXPECT_EQ(fused.ops.count("ai.onyx:GemmCast") ? fused.ops.at("ai.onyx:GemmCast") : 0, 2);
  EXPECT_EQ(plain.ops.count("ai.onyx:GemmCast"), 0u);
  for (const auto& [name, want] : plain.grads) {
    SCOPED_TRACE(name);
    ASSERT_EQ(fused.grads.at(name).dtype(), DataType::Float);
    // The unfused graph rounds dW to bf16 (8 bits) before casting it back; the fused one does
    // not: the two agree to bf16's precision.
    EXPECT_LT(relative_error(fused.grads.at(name), want.to_double_vector()), 1e-2);
  }
}

/// One GemmCast of [37, K] x [K, 29] random operands rounded to `dt` against the float64 product
/// of the rounded values: max error relative to the largest output.
static double gemm_cast_error(DataType dt, int64_t K, int ta, int tb, float alpha) {
  const int64_t M = 37, N = 29;
  const Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N};
  const Tensor a = random_normal(as, 7), bt = random_normal(bs, 8);
  ModelBuilder b(17, "ai.onyx");
  b.input("a", DataType::Float, as).input("b", DataType::Float, bs);
  b.node("Cast", {"a"}, {"a16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
  b.node("Cast", {"b"}, {"b16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
  set_attrs(b.node("GemmCast", {"a16", "b16"}, {"y"}, "ai.onyx"),
            {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", alpha),
             attr_int("to", kFloat)});
  b.output("y");
  const Tensor y = b.session().run({{"a", a}, {"b", bt}}).at("y");
  EXPECT_EQ(y.dtype(), DataType::Float);
  EXPECT_EQ(y.shape(), (Shape{M, N}));
  const float* pa = a.data<float>();
  const float* pb = bt.data<float>();
  std::vector<double> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k)
        sum += rounded(pa[ta ? k * M + i : i * K + k], dt) * rounded(pb[tb ? j * K + k : k * N + j], dt);
      want[i * N + j] = alpha * sum;
    }
  return relative_error(y, want);
}

// GemmCast over bf16 and fp16 operands, every transA/transB, alpha 1 and not, odd sizes: the
// float32 output is the product of the 16-bit values accumulated in float32, far closer to the
// exact product than a 16-bit output could be. Past K = 512 the product may be rounded to the
// 16-bit type first (where oneDNN's float32 output is slower), as the unfused graph does.
TEST(GemmCastFusion, KernelWritesTheFloat32Accumulator) {
  for (int64_t K : {70, 600})
    for (DataType dt : {DataType::BFloat16, DataType::Float16})
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (float alpha : {1.0f, 0.5f}) {
            SCOPED_TRACE(fmt::format("{} K {} transA {} transB {} alpha {}", dtype_name(dt), K, ta,
                                     tb, alpha));
            const double rounding = dt == DataType::BFloat16 ? 8e-3 : 1e-3;
            EXPECT_LT(gemm_cast_error(dt, K, ta, tb, alpha), K <= 512 ? 1e-5 : rounding);
          }
}

TEST(GemmCastFusion, LookalikesAreLeftAlone) {
  // Cast(Gemm(a, b[, c]), to) with a and b in `dt`; the Gemm's output also a graph output with
  // `gemm_out`.
  auto fused = [](DataType dt, bool with_c, DataType to, bool gemm_out) {
    ModelBuilder b(17);
    b.input("a", DataType::Float, Shape{6, 5}).input("b", DataType::Float, Shape{5, 4});
    b.initializer("c", randn({4}, 9));
    b.node("Cast", {"a"}, {"a16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    b.node("Cast", {"b"}, {"b16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    b.node("Cast", {"c"}, {"c16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    std::vector<std::string> ins{"a16", "b16"};
    if (with_c) ins.push_back("c16");
    b.node("Gemm", ins, {"p"});
    b.node("Cast", {"p"}, {"y"}).attrs["to"] = attr_int("to", static_cast<int64_t>(to));
    b.output("y");
    if (gemm_out) b.output("p");
    auto ops = op_counts(b.session());
    return ops.count("ai.onyx:GemmCast") ? ops.at("ai.onyx:GemmCast") : 0;
  };
  const DataType bf = DataType::BFloat16, f = DataType::Float;
  EXPECT_EQ(fused(bf, false, f, false), 1);
  EXPECT_EQ(fused(DataType::Float16, false, f, false), 1);
  EXPECT_EQ(fused(bf, true, f, false), 0);                 // a C input
  EXPECT_EQ(fused(bf, false, DataType::Float16, false), 0);  // not to float32
  EXPECT_EQ(fused(bf, false, f, true), 0);                 // the 16-bit product is read too
  EXPECT_EQ(fused(f, false, f, false), 0);                 // a float32 product
}

TEST(GemmCastFusion, BadAttributesAreRefusedAtCreation) {
  auto make = [](int64_t to, bool with_c) {
    ModelBuilder b(17, "ai.onyx");
    b.input("a", DataType::BFloat16, Shape{3, 2}).input("b", DataType::BFloat16, Shape{2, 4});
    b.input("c", DataType::BFloat16, Shape{4});
    std::vector<std::string> ins{"a", "b"};
    if (with_c) ins.push_back("c");
    b.node("GemmCast", ins, {"y"}, "ai.onyx").attrs["to"] = attr_int("to", to);
    b.output("y");
    return b.session();
  };
  expect_error([&] { make(static_cast<int64_t>(DataType::Int32), false); },
               "GemmCast writes float32 (to = FLOAT) and has no C; got to int32");
  expect_error([&] { make(kFloat, true); }, "and a C input");
}

}  // namespace onyx::test
