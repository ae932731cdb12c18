// CPU compute kernels (matmul, conv, pool, normalization) against hand-computed values,
// across the oneDNN paths (float32, bfloat16) and our own loops (double, integers), plus
// the bad-input errors they raise.
#include <array>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;
using onyx::test::Named;
using onyx::test::T_;
using onyx::test::run_op;

namespace {

Tensor iota(const Shape& shape, DataType dt = DataType::Float) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0);
  if (dt == DataType::Double) return T_<double>(shape, v);
  return T_<float>(shape, v);
}

using onyx::test::expect_error;

const std::vector<double> kA23 = {1, 2, 3, 4, 5, 6}, kB32 = {1, 0, 0, 1, 1, 1};

TEST(NnOps, MatMul2dEveryDtype) {
  auto y = run_op("MatMul", {{"a", T_<float>({2, 3}, kA23)}, {"b", T_<float>({3, 2}, kB32)}});
  expect_near(y.at("y0"), {4, 5, 10, 11});
  y = run_op("MatMul", {{"a", T_<double>({2, 3}, kA23)}, {"b", T_<double>({3, 2}, kB32)}});
  expect_near(y.at("y0"), {4, 5, 10, 11});
  y = run_op("MatMul", {{"a", T_<int64_t>({2, 3}, kA23)}, {"b", T_<int64_t>({3, 2}, kB32)}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Int64);
  expect_near(y.at("y0"), {4, 5, 10, 11});
  y = run_op("MatMul", {{"a", T_<bfloat16>({2, 3}, kA23)}, {"b", T_<bfloat16>({3, 2}, kB32)}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::BFloat16);
  expect_near(y.at("y0"), {4, 5, 10, 11});
}

// Integer products and sums past the type wrap around (as numpy and ONNX Runtime give) instead
// of overflowing a signed accumulator (undefined; UBSan's sanitizer stage checks this test).
TEST(NnOps, IntegerMatMulWrapsAround) {
  auto y = run_op("MatMul", {{"a", Tensor::from_vector<int64_t>({1, 2}, {int64_t{1} << 40, 3})},
                             {"b", Tensor::from_vector<int64_t>({2, 1}, {int64_t{1} << 40, 1})}});
  EXPECT_EQ(y.at("y0").to_int64_vector(), (std::vector<int64_t>{3}));  // 2^80 + 3 mod 2^64
  y = run_op("MatMul", {{"a", Tensor::from_vector<int32_t>({1, 2}, {INT32_MAX, -7})},
                        {"b", Tensor::from_vector<int32_t>({2, 1}, {2, 1})}});
  EXPECT_EQ(y.at("y0").to_int64_vector(), (std::vector<int64_t>{-9}));  // 2 INT32_MAX = -2 mod 2^32
  // Einsum's own contraction, and a plain sum over a label.
  y = run_op("Einsum", {{"a", Tensor::from_vector<int64_t>({1, 2}, {int64_t{1} << 40, 3})},
                        {"b", Tensor::from_vector<int64_t>({2, 1}, {int64_t{1} << 40, 1})}},
             {attr_string("equation", "ij,jk->ik")});
  EXPECT_EQ(y.at("y0").to_int64_vector(), (std::vector<int64_t>{3}));
  y = run_op("Einsum", {{"a", Tensor::from_vector<int32_t>({2}, {INT32_MAX, 1})}},
             {attr_string("equation", "i->")});
  EXPECT_EQ(y.at("y0").to_int64_vector(), (std::vector<int64_t>{INT32_MIN}));
}

TEST(NnOps, MatMulBroadcastAndVectors) {
  // A batched over a shared B, then B batched over a shared A.
  auto y = run_op("MatMul", {{"a", T_({2, 1, 2}, {1, 2, 3, 4})}, {"b", T_({2, 2}, {1, 1, 0, 1})}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{2, 1, 2}));
  expect_near(y.at("y0"), {1, 3, 3, 7});
  y = run_op("MatMul", {{"a", T_({2, 2}, {1, 0, 0, 1})}, {"b", iota({3, 2, 2})}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{3, 2, 2}));
  expect_near(y.at("y0"), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  y = run_op("MatMul", {{"a", T_({3}, {1, 2, 3})}, {"b", T_({3}, {4, 5, 6})}});
  EXPECT_EQ(y.at("y0").shape(), Shape{});
  expect_near(y.at("y0"), {32});
  y = run_op("MatMul",
             {{"a", T_<double>({3}, {1, 2, 3})}, {"b", T_<double>({2, 3, 1}, {1, 1, 1, 0, 0, 2})}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{2, 1}));
  expect_near(y.at("y0"), {6, 6});
}

TEST(NnOps, GemmTransposesAlphaBetaBroadcastC) {
  // A' = [[1,2,3],[4,5,6]] stored transposed; B' = [[1,0],[0,1],[1,1]] stored transposed.
  Tensor a = T_({3, 2}, {1, 4, 2, 5, 3, 6}), b = T_({2, 3}, {1, 0, 1, 0, 1, 1});
  auto y = run_op("Gemm", {{"a", a}, {"b", b}, {"c", T_({2}, {10, 20})}},
                  {attr_int("transA", 1), attr_int("transB", 1), attr_float("alpha", 2),
                   attr_float("beta", 0.5f)});
  expect_near(y.at("y0"), {13, 20, 25, 32});
  y = run_op("Gemm",
             {{"a", T_<int32_t>({3, 2}, {1, 4, 2, 5, 3, 6})},
              {"b", T_<int32_t>({2, 3}, {1, 0, 1, 0, 1, 1})},
              {"c", T_<int32_t>({2, 1}, {10, 20})}},
             {attr_int("transA", 1), attr_int("transB", 1), attr_float("alpha", 2)});
  expect_near(y.at("y0"), {18, 20, 40, 42});
  y = run_op("Gemm", {{"a", T_({2, 3}, kA23)}, {"b", T_({3, 2}, kB32)}});
  expect_near(y.at("y0"), {4, 5, 10, 11});
}

// One-row float products take the GEMV path: every layout against a double reference, with
// sizes that leave tails (K % 4, K % 16) and several column ranges per thread.
TEST(NnOps, OneRowProductsMatchTheDefinition) {
  const int64_t K = 37, N = 300;
  std::vector<double> xv(K), bv(K * N), cv(N);
  for (int64_t i = 0; i < K; ++i) xv[i] = 0.01 * double((i * 13) % 29) - 0.1;
  for (int64_t i = 0; i < K * N; ++i) bv[i] = 0.02 * double((i * 7) % 31) - 0.3;
  for (int64_t j = 0; j < N; ++j) cv[j] = double(j % 5) - 2.0;
  auto want = [&](bool trans_b, double alpha, double beta, bool per_column_c) {
    std::vector<double> y(N);
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += xv[k] * bv[trans_b ? j * K + k : k * N + j];
      y[j] = alpha * acc + beta * (per_column_c ? cv[j] : cv[0]);
    }
    return y;
  };
  Tensor b = T_({K, N}, bv), bt = T_({N, K}, bv);
  expect_near(run_op("MatMul", {{"a", T_({1, K}, xv)}, {"b", b}}).at("y0"), want(false, 1, 0, true),
              1e-5);
  Tensor y1 = run_op("MatMul", {{"a", T_({K}, xv)}, {"b", b}}).at("y0");
  EXPECT_EQ(y1.shape(), Shape{N});
  expect_near(y1, want(false, 1, 0, true), 1e-5);
  for (bool trans_b : {false, true}) {
    auto y = run_op("Gemm", {{"a", T_({1, K}, xv)}, {"b", trans_b ? bt : b}, {"c", T_({N}, cv)}},
                    {attr_int("transB", trans_b), attr_float("alpha", 0.5f),
                     attr_float("beta", 2.0f)});
    expect_near(y.at("y0"), want(trans_b, 0.5, 2.0, true), 1e-5);
    y = run_op("Gemm", {{"a", T_({K, 1}, xv)}, {"b", trans_b ? bt : b}, {"c", T_({1, 1}, {cv[0]})}},
               {attr_int("transA", 1), attr_int("transB", trans_b)});
    expect_near(y.at("y0"), want(trans_b, 1.0, 1.0, false), 1e-5);
  }
}

// With more than one thread a one-row product splits B into contiguous blocks: a plain B by
// rows (ranges of k, each thread summing its own partial row, added up after) and a transposed
// B by columns. Sizes give 1-3 blocks with uneven ends and vector tails in every block.
TEST(NnOps, OneRowProductsSplitAcrossThreadsMatchTheDefinition) {
  for (auto [K, N] : std::vector<std::pair<int64_t, int64_t>>{{517, 70}, {200, 301}, {130, 5}}) {
    std::vector<double> xv(K), bv(K * N);
    for (int64_t i = 0; i < K; ++i) xv[i] = 0.01 * double((i * 13) % 29) - 0.1;
    for (int64_t i = 0; i < K * N; ++i) bv[i] = 0.02 * double((i * 7) % 31) - 0.3;
    for (bool trans_b : {false, true}) {
      std::vector<double> want(N);
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) want[j] += xv[k] * bv[trans_b ? j * K + k : k * N + j];
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(fmt::format("K {} N {} trans_b {} threads {}", K, N, trans_b, threads));
        ModelBuilder b(17);
        b.input("a", DataType::Float, Shape{1, K});
        b.input("b", DataType::Float, trans_b ? Shape{N, K} : Shape{K, N});
        b.node("Gemm", {"a", "b"}, {"y"}).attrs["transB"] = attr_int("transB", trans_b);
        b.output("y");
        SessionOptions opts;
        opts.intra_op_threads = threads;
        Session s = b.session(opts);
        for (int run = 0; run < 2; ++run)  // the second run reuses the partial rows' buffer
          expect_near(s.run({{"a", T_({1, K}, xv)}, {"b", T_(trans_b ? Shape{N, K} : Shape{K, N}, bv)}})
                          .at("y"),
                      want, 1e-5);
      }
    }
  }
}

// Constant weights are reordered once into the primitive's layout (one copy per layout, shared by
// the entries of every row count): MatMul, transposed FusedMatMul and Gemm with an initializer
// B give the double reference on every run, for several row counts, in float32 and bfloat16.
TEST(NnOps, ConstantWeightsPackedOnceGiveTheDefinition) {
  const int64_t K = 70, N = 130;
  std::vector<double> bv(K * N);
  for (int64_t i = 0; i < K * N; ++i) bv[i] = 0.02 * double((i * 7) % 31) - 0.3;
  for (DataType dt : {DataType::Float, DataType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (const char* op : {"MatMul", "Gemm", "FusedMatMul"}) {
      SCOPED_TRACE(op);
      const bool trans = std::string(op) != "MatMul";  // Gemm and FusedMatMul read B as [N, K]
      std::vector<double> stored(K * N);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n) stored[trans ? n * K + k : k * N + n] = bv[k * N + n];
      const bool fused = std::string(op) == "FusedMatMul";
      ModelBuilder b(17, fused ? "com.microsoft" : "");
      b.input("a", DataType::Float, SymShape{Dim::symbol("rows"), Dim::fixed(K)});
      b.initializer("w", T_<float>(trans ? Shape{N, K} : Shape{K, N}, stored));
      b.node("Cast", {"a"}, {"a_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
      b.node("Cast", {"w"}, {"w_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
      Node& n = b.node(op, {"a_t", "w_t"}, {"y_t"}, fused ? "com.microsoft" : "");
      if (trans) n.attrs["transB"] = attr_int("transB", 1);
      b.node("Cast", {"y_t"}, {"y"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
      b.output("y");
      Session s = b.session();  // constant folding turns Cast(w) into the initializer B
      for (int64_t rows : {3, 128, 3, 17}) {
        std::vector<double> av(rows * K);
        for (int64_t i = 0; i < rows * K; ++i) av[i] = 0.01 * double((i * 13 + rows) % 29) - 0.1;
        std::vector<double> want(rows * N, 0.0);
        const bool bf16 = dt == DataType::BFloat16;
        auto round = [&](double v) { return bf16 ? double(float(bfloat16(float(v)))) : v; };
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < N; ++c) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += round(av[r * K + k]) * round(bv[k * N + c]);
            want[r * N + c] = acc;
          }
        Tensor y = s.run({{"a", T_<float>({rows, K}, av)}}).at("y");
        EXPECT_EQ(y.shape(), (Shape{rows, N}));
        expect_near(y, want, bf16 ? 2e-2 : 1e-5);
      }
    }
  }
}

TEST(NnOps, MatMulIntegerZeroPoints) {
  auto y = run_op("MatMulInteger", {{"a", T_<uint8_t>({2, 2}, {11, 12, 13, 14})},
                                    {"b", T_<uint8_t>({2, 1}, {1, 2})},
                                    {"az", T_<uint8_t>({}, {10})}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Int32);
  expect_near(y.at("y0"), {1 + 4, 3 + 8});
}

TEST(NnOps, ConvPaddingStridesBiasAndDouble) {
  Tensor w = T_({1, 1, 2, 2}, {1, 1, 1, 1});
  auto y = run_op("Conv", {{"x", iota({1, 1, 3, 3})}, {"w", w}, {"b", T_({1}, {1})}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{1, 1, 2, 2}));
  expect_near(y.at("y0"), {9, 13, 21, 25});
  std::vector<Attribute> attrs = {attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {2, 2})};
  y = run_op("Conv", {{"x", iota({1, 1, 3, 3})}, {"w", w}}, attrs);
  expect_near(y.at("y0"), {0, 3, 9, 24});
  y = run_op(
      "Conv",
      {{"x", iota({1, 1, 3, 3}, DataType::Double)}, {"w", T_<double>({1, 1, 2, 2}, {1, 1, 1, 1})}},
      attrs);
  EXPECT_EQ(y.at("y0").dtype(), DataType::Double);
  expect_near(y.at("y0"), {0, 3, 9, 24});
}

TEST(NnOps, ConvDepthwiseAndSamePadding) {
  auto y = run_op(
      "Conv", {{"x", T_({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}, {"w", T_({2, 1, 1, 1}, {2, 3})}},
      {attr_int("group", 2)});
  expect_near(y.at("y0"), {2, 4, 6, 8, 15, 18, 21, 24});
  // 1-D SAME_UPPER with kernel 2: one pad on the right.
  y = run_op("Conv", {{"x", T_({1, 1, 3}, {1, 2, 3})}, {"w", T_({1, 1, 2}, {1, 1})}},
             {attr_string("auto_pad", "SAME_UPPER")});
  expect_near(y.at("y0"), {3, 5, 3});
}

TEST(NnOps, ConvHalfFloats) {
  for (DataType dt : {DataType::Float16, DataType::BFloat16}) {
    auto cast = [&](const std::vector<double>& v, const Shape& s) {
      return dt == DataType::Float16 ? T_<float16>(s, v) : T_<bfloat16>(s, v);
    };
    auto y = run_op("Conv", {{"x", cast({0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 3, 3})},
                             {"w", cast({1, 1, 1, 1}, {1, 1, 2, 2})},
                             {"b", cast({1}, {1})}});
    EXPECT_EQ(y.at("y0").dtype(), dt);
    expect_near(y.at("y0"), {9, 13, 21, 25});
  }
}

TEST(NnOps, ConvTranspose1d) {
  Tensor x = T_({1, 1, 3}, {1, 2, 3}), w = T_({1, 1, 2}, {1, 1});
  auto y = run_op("ConvTranspose", {{"x", x}, {"w", w}});
  expect_near(y.at("y0"), {1, 3, 5, 3});
  y = run_op("ConvTranspose", {{"x", x}, {"w", w}}, {attr_ints("strides", {2})});
  expect_near(y.at("y0"), {1, 1, 2, 2, 3, 3});
  // output_shape one longer than natural: a trailing zero (our own loop, negative pad).
  y = run_op("ConvTranspose", {{"x", x}, {"w", w}},
             {attr_ints("strides", {2}), attr_ints("output_shape", {7})});
  expect_near(y.at("y0"), {1, 1, 2, 2, 3, 3, 0});
}

TEST(NnOps, MaxPoolCeilModeWithIndices) {
  Tensor x = T_({1, 1, 3, 3}, {5, 1, 7, 2, 9, 3, 8, 4, 6});
  std::vector<Attribute> attrs = {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2}),
                                  attr_int("ceil_mode", 1)};
  auto y = run_op("MaxPool", {{"x", x}}, attrs, 2);
  expect_near(y.at("y0"), {9, 7, 8, 6});
  expect_near(y.at("y1"), {4, 2, 6, 8});
  attrs.push_back(attr_int("storage_order", 1));
  y = run_op("MaxPool", {{"x", x}}, attrs, 2);
  expect_near(y.at("y1"), {4, 6, 2, 8});
  y = run_op("MaxPool", {{"x", T_<uint8_t>({1, 1, 3, 3}, {5, 1, 7, 2, 9, 3, 8, 4, 6})}}, attrs);
  expect_near(y.at("y0"), {9, 7, 8, 6});
}

// 2-D float MaxPool without Indices takes a row-max fast path; with Indices it runs the
// reference loops. Both must agree on every geometry: kernels wider than the stride, pads on
// either side, ceil_mode, SAME padding, kernels as large as the input.
TEST(NnOps, MaxPoolFastPathMatchesReferenceLoops) {
  struct Geo {
    Shape in, k, s, pads;
    int64_t ceil;
    std::string auto_pad;
  };
  const std::vector<Geo> geos = {
      {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, 0, ""},   // ResNet's stem pool
      {{1, 2, 7, 8}, {2, 3}, {1, 2}, {0, 2, 1, 0}, 1, ""},    // asymmetric pads, ceil_mode
      {{1, 1, 5, 5}, {5, 5}, {1, 1}, {}, 0, ""},              // one window, the whole plane
      {{1, 2, 6, 7}, {3, 2}, {3, 3}, {}, 1, ""},              // stride > kernel, ceil_mode
      {{1, 1, 4, 9}, {1, 4}, {1, 1}, {0, 3, 0, 3}, 0, ""},    // pads of kernel - 1
      {{1, 2, 8, 5}, {3, 3}, {2, 2}, {}, 0, "SAME_UPPER"},
      {{1, 2, 8, 5}, {2, 4}, {2, 1}, {}, 0, "SAME_LOWER"}};
  for (const auto& g : geos) {
    std::vector<double> v(static_cast<size_t>(shape_numel(g.in)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 37) % 101) - 50.0;
    Tensor x = T_<float>(g.in, v);
    std::vector<Attribute> attrs = {attr_ints("kernel_shape", g.k), attr_ints("strides", g.s),
                                    attr_int("ceil_mode", g.ceil)};
    if (!g.pads.empty()) attrs.push_back(attr_ints("pads", g.pads));
    if (!g.auto_pad.empty()) attrs.push_back(attr_string("auto_pad", g.auto_pad));
    auto fast = run_op("MaxPool", {{"x", x}}, attrs);
    auto ref = run_op("MaxPool", {{"x", x}}, attrs, 2);
    ASSERT_EQ(fast.at("y0").shape(), ref.at("y0").shape()) << shape_str(g.in);
    EXPECT_EQ(fast.at("y0").to_double_vector(), ref.at("y0").to_double_vector())
        << shape_str(g.in) << " k " << shape_str(g.k) << " s " << shape_str(g.s);
  }
}

// Our own MaxPool loops (double, int8/uint8, dilations, 1-D/3-D, column-major Indices) run one
// pass per axis; each case must give the direct loop's first maximum in (d, h, w) order, value
// and index, with many ties and (for double) NaN among the values.
TEST(NnOps, SeparableMaxPoolMatchesTheDirectLoop) {
  struct Geo {
    Shape in, k, s, d, pads;
    int64_t ceil = 0, column_major = 0;
  };
  const std::vector<Geo> geos = {
      {{1, 2, 9, 11}, {3, 2}, {2, 1}, {2, 3}, {1, 0, 2, 1}},
      {{2, 1, 7, 6}, {4, 3}, {1, 2}, {1, 1}, {3, 2, 3, 2}, 1},
      {{1, 1, 13}, {4}, {3}, {2}, {2, 5}, 1},
      {{1, 2, 4, 5, 6}, {2, 3, 2}, {1, 2, 2}, {2, 1, 2}, {1, 0, 1, 0, 2, 1}},
      {{1, 1, 5, 6, 7}, {3, 2, 3}, {2, 1, 3}, {1, 2, 1}, {0, 1, 2, 2, 0, 1}, 1, 1},
      {{1, 1, 8, 8}, {3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 0, 1},
      {{1, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1, 1, 1}}};
  for (const auto& g : geos) {
    const size_t r = g.in.size() - 2;
    std::vector<double> v(static_cast<size_t>(shape_numel(g.in)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double((i * 7) % 5);  // many ties
    v[3] = std::nan("");
    v[v.size() / 2] = std::nan("");
    for (DataType dt : {DataType::Double, DataType::UInt8}) {
      SCOPED_TRACE(shape_str(g.in) + " " + dtype_name(dt));
      std::vector<double> xv = v;
      if (dt == DataType::UInt8)
        for (double& e : xv) e = e != e ? 9 : e;
      Tensor x = dt == DataType::Double ? T_<double>(g.in, xv) : T_<uint8_t>(g.in, xv);
      std::vector<Attribute> attrs = {attr_ints("kernel_shape", g.k), attr_ints("strides", g.s),
                                      attr_ints("dilations", g.d), attr_ints("pads", g.pads),
                                      attr_int("ceil_mode", g.ceil), attr_int("storage_order", g.column_major)};
      auto y = run_op("MaxPool", {{"x", x}}, attrs, dt == DataType::Double ? 2 : 1, 12);
      const Shape os = y.at("y0").shape();
      const std::vector<double> yv = y.at("y0").to_double_vector();
      std::vector<int64_t> iv;
      if (dt == DataType::Double) iv = y.at("y1").to_int64_vector();
      // The direct loop, written out: 3-D view with leading 1s.
      std::array<int64_t, 3> I{1, 1, 1}, O{1, 1, 1}, K{1, 1, 1}, S{1, 1, 1}, D{1, 1, 1}, P{0, 0, 0};
      for (size_t a = 0; a < r; ++a) {
        const size_t t = 3 - r + a;
        I[t] = g.in[2 + a], O[t] = os[2 + a], K[t] = g.k[a], S[t] = g.s[a], D[t] = g.d[a], P[t] = g.pads[a];
      }
      const int64_t in_sz = I[0] * I[1] * I[2], out_sz = O[0] * O[1] * O[2];
      for (int64_t plane = 0; plane < g.in[0] * g.in[1]; ++plane)
        for (int64_t o = 0; o < out_sz; ++o) {
          const int64_t oo[3] = {o / (O[1] * O[2]), (o / O[2]) % O[1], o % O[2]};
          double best = 0;
          int64_t best_i = -1;
          for (int64_t kd = 0; kd < K[0]; ++kd)
            for (int64_t kh = 0; kh < K[1]; ++kh)
              for (int64_t kw = 0; kw < K[2]; ++kw) {
                const int64_t q[3] = {oo[0] * S[0] - P[0] + kd * D[0], oo[1] * S[1] - P[1] + kh * D[1],
                                      oo[2] * S[2] - P[2] + kw * D[2]};
                if (q[0] < 0 || q[0] >= I[0] || q[1] < 0 || q[1] >= I[1] || q[2] < 0 || q[2] >= I[2]) continue;
                const int64_t qi = (q[0] * I[1] + q[1]) * I[2] + q[2];
                const double e = xv[plane * in_sz + qi];
                if (best_i < 0 || e > best) best = e, best_i = qi;
              }
          const double got = yv[plane * out_sz + o];
          ASSERT_TRUE(got == best || (got != got && best != best)) << "output " << o << ": " << got << " vs " << best;
          if (iv.empty()) continue;
          const int64_t w = best_i % I[2], h = (best_i / I[2]) % I[1], d = best_i / (I[1] * I[2]);
          const int64_t si = g.column_major ? d + h * I[0] + w * I[0] * I[1] : best_i;
          ASSERT_EQ(iv[plane * out_sz + o], best_i < 0 ? -1 : plane * in_sz + si) << "output " << o;
        }
    }
  }
}

TEST(NnOps, AveragePoolCountIncludePad) {
  std::vector<Attribute> attrs = {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2}),
                                  attr_ints("pads", {1, 1, 1, 1})};
  auto y = run_op("AveragePool", {{"x", iota({1, 1, 3, 3})}}, attrs);
  expect_near(y.at("y0"), {0, 1.5, 4.5, 6});
  attrs.push_back(attr_int("count_include_pad", 1));
  y = run_op("AveragePool", {{"x", iota({1, 1, 3, 3})}}, attrs);
  expect_near(y.at("y0"), {0, 0.75, 2.25, 6});
  y = run_op("AveragePool", {{"x", iota({1, 1, 3, 3}, DataType::Double)}}, attrs);
  expect_near(y.at("y0"), {0, 0.75, 2.25, 6});
  y = run_op("GlobalAveragePool", {{"x", T_({1, 2, 2, 1}, {1, 2, 3, 4})}});
  EXPECT_EQ(y.at("y0").shape(), (Shape{1, 2, 1, 1}));
  expect_near(y.at("y0"), {1.5, 3.5});
}

TEST(NnOps, BatchAndInstanceNormalization) {
  auto y = run_op("BatchNormalization",
                  {{"x", T_({1, 2, 1, 2}, {1, 2, 3, 4})},
                   {"s", T_({2}, {1, 2})},
                   {"b", T_({2}, {0, 1})},
                   {"m", T_({2}, {1, 3})},
                   {"v", T_({2}, {4, 1})}},
                  {attr_float("epsilon", 0)});
  expect_near(y.at("y0"), {0, 0.5, 1, 3});
  y = run_op("InstanceNormalization",
             {{"x", T_({1, 1, 2}, {1, 3})}, {"s", T_({1}, {2})}, {"b", T_({1}, {1})}},
             {attr_float("epsilon", 0)});
  expect_near(y.at("y0"), {-1, 3});
}

TEST(NnOps, LayerGroupAndRmsNormalization) {
  auto y = run_op("LayerNormalization",
                  {{"x", T_({2, 2}, {1, 3, 2, 6})}, {"s", T_({2}, {1, 1})}, {"b", T_({2}, {0, 0})}},
                  {attr_float("epsilon", 0)}, 3);
  expect_near(y.at("y0"), {-1, 1, -1, 1});
  EXPECT_EQ(y.at("y1").shape(), (Shape{2, 1}));
  expect_near(y.at("y1"), {2, 4});
  expect_near(y.at("y2"), {1, 0.5});
  y = run_op("GroupNormalization",
             {{"x", T_({1, 4, 1, 1}, {1, 3, 5, 7})},
              {"s", T_({4}, {1, 1, 1, 1})},
              {"b", T_({4}, {0, 0, 0, 0})}},
             {attr_int("num_groups", 2), attr_float("epsilon", 0)});
  expect_near(y.at("y0"), {-1, 1, -1, 1});
  y = run_op("RMSNormalization", {{"x", T_({1, 2}, {3, 4})}, {"s", T_({2}, {1, 2})}},
             {attr_float("epsilon", 0)}, 1, 23);
  expect_near(y.at("y0"), {0.848528, 2.262742});
}

TEST(NnOps, Lrn) {
  // Channel 0 sums channels 0..1, channel 1 only itself; alpha / size = 1.
  auto y = run_op("LRN", {{"x", T_({1, 2, 1, 1}, {1, 2})}},
                  {attr_int("size", 2), attr_float("alpha", 2), attr_float("beta", 1)});
  expect_near(y.at("y0"), {1.0 / 6, 0.4});
}

TEST(NnOps, BadInputsThrow) {
  expect_error(
      [] {
        run_op("MatMul", {{"a", iota({2, 3})}, {"b", iota({2, 2})}}, {}, 1, 21, true);
      },
      "inner dims");
  expect_error(
      [] {
        run_op("Conv", {{"x", iota({1, 3, 4, 4})}, {"w", iota({1, 2, 2, 2})}}, {}, 1, 21, true);
      },
      "does not fit");
  expect_error(
      [] {
        run_op("Gemm", {{"a", iota({2, 3})}, {"b", iota({3, 2})}, {"c", iota({3})}}, {}, 1, 21,
               true);
      },
      "does not broadcast");
}

}  // namespace

// Found by tests/fuzz/fuzz_model.cpp: DeformConv read dilations[1], strides[1] and pads[3]
// whatever the attributes' lengths (a heap-buffer-overflow under ASan); they are checked when
// the session is built.
TEST(NnOps, DeformConvAttributeListsAreCheckedAtCreation) {
  for (const auto& attr : {attr_ints("dilations", {1}), attr_ints("strides", {1, 1, 1}), attr_ints("pads", {0, 0}),
                           attr_ints("strides", {0, 1}), attr_ints("pads", {0, -1, 0, 0})}) {
    SCOPED_TRACE(attr.name);
    ModelBuilder b(19);
    b.input("x", DataType::Float, Shape{1, 1, 4, 4});
    b.input("w", DataType::Float, Shape{1, 1, 2, 2});
    b.input("offset", DataType::Float, Shape{1, 8, 3, 3});
    onyx::test::set_attrs(b.node("DeformConv", {"x", "w", "offset"}, {"y"}), {attr});
    b.output("y");
    try {
      b.session();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("DeformConv node"), std::string::npos) << msg;
      EXPECT_NE(msg.find("attribute '" + attr.name + "'"), std::string::npos) << msg;
    }
  }
}

// Offsets are data: NaN, infinite or huge ones sample padding (zero) instead of being cast to
// int64 (undefined behaviour before); a zero offset is a plain convolution.
TEST(NnOps, DeformConvWithNonFiniteOrHugeOffsets) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const Tensor x = T_<float>({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor w = T_<float>({1, 1, 1, 1}, {1});
  const Tensor zero = T_<float>({1, 2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0});
  auto y = run_op("DeformConv", {{"x", x}, {"w", w}, {"o", zero}}, {}, 1, 19);
  expect_near(y.at("y0"), {1, 2, 3, 4});
  // Offsets [2, H, W]: dy then dx of each output position. NaN and infinite offsets give NaN
  // weights (garbage in); huge finite ones sample only zero padding.
  const Tensor bad = T_<float>({1, 2, 2, 2}, {nan, inf, 1e30f, -1e30f, 0, -inf, 0, 3e19f});
  y = run_op("DeformConv", {{"x", x}, {"w", w}, {"o", bad}}, {}, 1, 19);
  ASSERT_EQ(y.at("y0").shape(), Shape({1, 1, 2, 2}));
  const float* v = y.at("y0").data<float>();
  for (int i = 2; i < 4; ++i) EXPECT_EQ(v[i], 0.0f) << i;
}
