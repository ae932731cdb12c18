// Few-row products by panel-packed constant weights (kernels/cpu/panel_gemm.h): the SIMD
// tables' tiles bit for bit against one multiply-add chain per element, and the MatMul /
// FusedMatMulBias / Gemm kernels that take them against the definition for row counts on both
// sides of panel_gemm's range, in one session (the rows change from run to run).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/cpu/panel_gemm.h"
#include "kernels/cpu/simd/simd.h"
#include "test_util.h"

namespace onyx {
namespace {

using cpu::Isa;

std::vector<float> uniform(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Every table the CPU can run: each element is fmaf(a[k], b[k], acc) for k = 0..K-1 from 0,
// then + bias, then Relu, so it equals that scalar chain exactly, for every tile height (1 to
// 13 rows, and several tiles), every panel shape (a narrow last panel, a padded wide one) and
// both storage orders of B; a range of panels leaves the others' columns untouched.
TEST(PanelGemm, EachElementIsOneMultiplyAddChainInKOrder) {
  for (Isa isa : cpu::supported_isas()) {
    if (isa > Isa::Avx512) continue;  // the higher levels run the AVX-512 table
    const cpu::SimdTable& t = cpu::simd_for(isa);
    const int lanes = cpu::simd_lanes(t.isa);
    for (int64_t M : {1, 2, 5, 6, 7, 12, 13, 30}) {
      for (auto [K, N] : std::vector<std::pair<int64_t, int64_t>>{
               {1, 1}, {5, 7}, {64, 16}, {33, 17}, {100, 40}, {17, 100}}) {
        for (bool trans_b : {false, true}) {
          for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 bias, 2 bias + Relu
            SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " M " + std::to_string(M) + " K " +
                         std::to_string(K) + " N " + std::to_string(N) +
                         (trans_b ? " trans_b" : "") + " mode " + std::to_string(mode));
            const auto A = uniform(size_t(M * K), 1 + unsigned(M));
            const auto B = uniform(size_t(K * N), 2 + unsigned(K * N));
            const auto bias = uniform(size_t(N), 3);
            const cpu::PanelPackedB p = cpu::pack_panels(B.data(), K, N, trans_b, 1, lanes);
            std::vector<float> C(size_t(M * N), 12345.f);
            const float* bp = mode ? bias.data() : nullptr;
            const int64_t half = p.panels() / 2;
            t.panel_gemm(M, N, K, A.data(), K, p.data.data<float>(), 0, half, C.data(), N, bp,
                         mode == 2);
            for (int64_t j = half * 2 * lanes; j < N; ++j) ASSERT_EQ(C[j], 12345.f) << j;
            t.panel_gemm(M, N, K, A.data(), K, p.data.data<float>(), half, p.panels(),
                         C.data(), N, bp, mode == 2);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                float acc = 0.f;
                for (int64_t k = 0; k < K; ++k)
                  acc = std::fma(A[i * K + k], trans_b ? B[j * K + k] : B[k * N + j], acc);
                if (mode) acc += bias[j];
                if (mode == 2) acc = acc > 0.f ? acc : 0.f;
                ASSERT_EQ(C[i * N + j], acc) << "row " << i << " col " << j;
              }
          }
        }
      }
    }
  }
}

TEST(PanelGemm, PackedLayoutAndRange) {
  // 16-lane panels: 48 or 40 columns are a panel of 32 and a narrow one of 16 (8 of them zero
  // for 40); 56 columns a second panel of 32 with 8 zero columns.
  for (auto [N, floats] : std::vector<std::pair<int64_t, int64_t>>{{48, 48}, {40, 48}, {56, 64}, {32, 32}}) {
    const auto B = uniform(size_t(3 * N), 9);
    const cpu::PanelPackedB p = cpu::pack_panels(B.data(), 3, N, false, 2, 16);
    EXPECT_EQ(p.data.numel(), floats * 3) << N;
    EXPECT_EQ(p.panels(), (N + 31) / 32) << N;
    const float* d = p.data.data<float>();
    EXPECT_EQ(d[1 * 32 + 5], B[1 * N + 5]);  // k 1, column 5: first panel
  }
  // Where it runs: never one row (gemv_f32's); 2 to 64 rows on either table, up to 256 on
  // AVX2's (where oneDNN's matmul packs B on every call).
  const bool avx2 = cpu::simd().isa == Isa::Avx2;
  EXPECT_FALSE(cpu::panel_gemm_suits(1));
  EXPECT_TRUE(cpu::panel_gemm_suits(2));
  EXPECT_TRUE(cpu::panel_gemm_suits(32));
  EXPECT_TRUE(cpu::panel_gemm_suits(64));
  EXPECT_EQ(cpu::panel_gemm_suits(65), avx2);
  EXPECT_EQ(cpu::panel_gemm_suits(256), avx2);
  EXPECT_FALSE(cpu::panel_gemm_suits(257));
}

/// act(x . w + bias) in double, w [K, N] or (trans_w) [N, K]; no bias when it is empty.
std::vector<double> reference(const Tensor& x, const Tensor& w, bool trans_w,
                              const std::vector<float>& bias, bool relu) {
  const auto xv = x.to_double_vector(), wv = w.to_double_vector();
  const int64_t K = x.shape().back(), N = trans_w ? w.dim(0) : w.dim(1), rows = x.numel() / K;
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N; ++j) {
      double v = bias.empty() ? 0.0 : bias[j];
      for (int64_t k = 0; k < K; ++k) v += xv[r * K + k] * wv[trans_w ? j * K + k : k * N + j];
      out.push_back(relu ? std::max(v, 0.0) : v);
    }
  return out;
}

// One session per threads count and product form, run with row counts below, inside and above
// panel_gemm's range in turn (1: gemv_f32; 2-64: panel_gemm on AVX-512; 65+: oneDNN), each
// against the definition; the same rows run again give the same bits.
TEST(PanelGemm, ProductsMatchTheDefinitionAsTheRowsChange) {
  const int64_t K = 70, N = 50;
  const Tensor w = test::random_normal({K, N}, 21, 0.3f), wt = test::random_normal({N, K}, 22, 0.3f);
  const auto bias = uniform(size_t(N), 23);
  const Tensor bias_t = Tensor::from_vector<float>({N}, bias);
  // {form, relu}: MatMul + Add + Relu (FusedMatMulBias), plain MatMul, Gemm transB with C and
  // Relu (FusedMatMulBias), Gemm with alpha 0.5 (oneDNN or loops only).
  for (const std::string form : {"matmul_bias_relu", "matmul", "gemm_relu", "gemm_alpha"}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(form + " threads " + std::to_string(threads));
      const bool gemm = form.starts_with("gemm");
      test::ModelBuilder b(17);
      b.input("x", DataType::Float, SymShape{Dim::symbol("rows"), Dim::fixed(K)});
      b.initializer("w", gemm ? wt : w).initializer("bias", bias_t);
      if (form == "matmul_bias_relu") {
        b.node("MatMul", {"x", "w"}, {"y"});
        b.node("Add", {"y", "bias"}, {"z"});
        b.node("Relu", {"z"}, {"out"});
      } else if (form == "matmul") {
        b.node("MatMul", {"x", "w"}, {"out"});
      } else {
        Node& g = b.node("Gemm", {"x", "w", "bias"}, {form == "gemm_relu" ? "z" : "out"});
        g.attrs["transB"] = test::attr_int("transB", 1);
        if (form == "gemm_alpha") g.attrs["alpha"] = test::attr_float("alpha", 0.5f);
        if (form == "gemm_relu") b.node("Relu", {"z"}, {"out"});
      }
      b.output("out");
      SessionOptions opts;
      opts.intra_op_threads = threads;
      Session s = b.session(opts);
      for (int64_t rows : {1, 2, 13, 64, 65, 130, 300, 32, 1, 5}) {
        SCOPED_TRACE("rows " + std::to_string(rows));
        const Tensor x = test::random_normal({rows, K}, 30 + unsigned(rows));
        const Tensor y = s.run({{"x", x}}).at("out");
        ASSERT_EQ(y.shape(), (Shape{rows, N}));
        std::vector<double> want =
            reference(x, gemm ? wt : w, gemm, form == "matmul" ? std::vector<float>{} : bias,
                      form.ends_with("relu"));
        if (form == "gemm_alpha")  // 0.5 * x w^T + bias
          want = [&] {
            auto p = reference(x, wt, true, {}, false);
            for (int64_t i = 0; i < rows * N; ++i) p[i] = 0.5 * p[i] + bias[i % N];
            return p;
          }();
        test::expect_near(y, want, 2e-5);
        const Tensor again = s.run({{"x", x}}).at("out");
        ASSERT_EQ(std::memcmp(again.raw(), y.raw(), y.nbytes()), 0);
      }
    }
  }
}

TEST(PanelGemm, WeightsPackedAheadAreDroppedUnlessARunReadsThem) {
  // prepare() packs for a batch of 1 where the batch is dynamic; runs with more rows take
  // oneDNN's product (with its own pack), and the panels nobody read are freed, not kept beside.
  const Tensor B = test::randn({64, 48}, 3);
  cpu::PanelWeights w;
  const size_t bytes = w.make_ahead(B, false, 1);
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(w.make_ahead(B, false, 1), 0u);  // made once
  w.drop_unread_ahead();
  EXPECT_EQ(w.make_ahead(B, false, 1), bytes);  // it was freed: made again
  const cpu::PanelPackedB& read = w.get(B, false, 1);  // a run reads it
  EXPECT_EQ(read.data.nbytes(), bytes);
  w.drop_unread_ahead();
  EXPECT_EQ(w.make_ahead(B, false, 1), 0u);  // kept: a run reads it
  // Packed by a run first: never dropped.
  cpu::PanelWeights lazy;
  lazy.get(B, false, 1);
  lazy.drop_unread_ahead();
  EXPECT_EQ(lazy.make_ahead(B, false, 1), 0u);
}

}  // namespace
}  // namespace onyx
