// Run-time ISA dispatch (kernels/cpu/isa.h) and the per-ISA SIMD tables (kernels/cpu/simd/):
// detection agrees with /proc/cpuinfo, ONYX_ISA is parsed and honoured, and every table this
// CPU can run computes what the scalar loops compute.
#include <gtest/gtest.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "graph/error.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/optimizer_math.h"
#include "kernels/cpu/simd/simd.h"

namespace onyx::cpu {
namespace {

std::set<std::string> cpuinfo_flags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

std::vector<float> randv(size_t n, unsigned seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Lengths around the vector widths (8, 16) and their multiples, so every tail runs.
// 1000 spans the maps' 256-element chunks; 5003 also their prefetch distance and a tail.
const std::vector<int64_t> kLengths = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 5003};

TEST(Isa, DetectionAgreesWithCpuinfo) {
  const auto flags = cpuinfo_flags();
  ASSERT_FALSE(flags.empty());
  ASSERT_TRUE(flags.count("avx2") && flags.count("fma")) << "the default build needs AVX2 + FMA";
  const bool avx512 = flags.count("avx512f") && flags.count("avx512bw") &&
                      flags.count("avx512dq") && flags.count("avx512vl") &&
                      flags.count("avx512cd");
  EXPECT_EQ(best_isa() >= Isa::Avx512, avx512) << isa_name(best_isa());
  if (avx512) {
    EXPECT_EQ(best_isa() >= Isa::Avx512Bf16, flags.count("avx512_bf16") > 0);
  }
  if (best_isa() >= Isa::Avx512Bf16) {
    EXPECT_EQ(best_isa() == Isa::Amx, flags.count("amx_bf16") && flags.count("amx_tile"));
  }
  auto all = supported_isas();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front(), Isa::Avx2);
  EXPECT_EQ(all.back(), best_isa());
}

TEST(Isa, ParsesOnyxIsa) {
  EXPECT_EQ(parse_isa("", Isa::Avx512), Isa::Avx512);
  EXPECT_EQ(parse_isa("native", Isa::Amx), Isa::Amx);
  EXPECT_EQ(parse_isa("avx2", Isa::Amx), Isa::Avx2);
  EXPECT_EQ(parse_isa("avx512", Isa::Avx512Bf16), Isa::Avx512);
  EXPECT_EQ(parse_isa("amx", Isa::Amx), Isa::Amx);
  try {
    parse_isa("avx512", Isa::Avx2);
    FAIL() << "asking for more than the CPU has must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("up to avx2"), std::string::npos) << e.what();
  }
  try {
    parse_isa("sse4", Isa::Amx);
    FAIL() << "an unknown level must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sse4'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("avx2, avx512"), std::string::npos) << e.what();
  }
}

TEST(Isa, ActiveIsaHonoursTheEnvironment) {
  const char* env = std::getenv("ONYX_ISA");
  const Isa want = parse_isa(env ? env : "", best_isa());
  EXPECT_EQ(active_isa(), want);
  EXPECT_EQ(simd().isa, simd_for(want).isa);
  // oneDNN is capped to the same level, so a forced avx2 run behaves like an AVX2 host.
  if (want == Isa::Avx2) {
    const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    EXPECT_NE(effective & avx512, avx512) << "oneDNN still uses AVX-512 under ONYX_ISA=avx2";
  }
}

TEST(Isa, TablesPerLevel) {
  EXPECT_EQ(simd_for(Isa::Avx2).isa, Isa::Avx2);
  EXPECT_EQ(simd_for(Isa::Avx512).isa, Isa::Avx512);
  EXPECT_EQ(simd_for(Isa::Amx).isa, Isa::Avx512);  // no AMX variant yet
}

double ref_unary(UnaryF32 op, double x) {
  switch (op) {
    case UnaryF32::Exp: return std::exp(x);
    case UnaryF32::Tanh: return std::tanh(x);
    case UnaryF32::Erf: return std::erf(x);
    case UnaryF32::Sigmoid: return 1 / (1 + std::exp(-x));
    case UnaryF32::GeluErf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryF32::GeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return NAN;
}

// Every table the CPU can run, against float64 and against the AVX2 table: the maps are the
// same per-element arithmetic in every variant, so they agree bit for bit.
TEST(SimdTables, UnaryMaps) {
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (UnaryF32 op : {UnaryF32::Exp, UnaryF32::Tanh, UnaryF32::Erf, UnaryF32::Sigmoid,
                        UnaryF32::GeluErf, UnaryF32::GeluTanh}) {
      for (int64_t n : kLengths) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " op " + std::to_string(int(op)) + " n " +
                     std::to_string(n));
        auto x = randv(size_t(n), 7 + unsigned(n), -8.f, 8.f);
        std::vector<float> y(x.size()), base(x.size());
        t.unary(op, x.data(), y.data(), n);
        simd_for(Isa::Avx2).unary(op, x.data(), base.data(), n);
        std::vector<float> in_place = x;  // the map's one-pointer path
        t.unary(op, in_place.data(), in_place.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const double want = ref_unary(op, x[i]);
          ASSERT_NEAR(y[i], want, 2e-6 * std::max(1.0, std::abs(want))) << "x " << x[i];
          ASSERT_EQ(y[i], base[i]) << "x " << x[i];
          ASSERT_EQ(in_place[i], y[i]) << "x " << x[i];
        }
      }
    }
    // In place, and NaN and the clamps pass through.
    std::vector<float> v = {NAN, -200.f, 200.f, 0.f};
    t.unary(UnaryF32::Exp, v.data(), v.data(), 4);
    EXPECT_TRUE(std::isnan(v[0]));
    EXPECT_EQ(v[1], 0.f);
    EXPECT_TRUE(std::isinf(v[2]) || v[2] > 1e38f);
    EXPECT_EQ(v[3], 1.f);
  }
}

// GELU's input gradient dY * (Phi(x) + x phi(x)), in the chunks that ask for lines ahead
// (simd_body.inc's with_prefetch): every table against float64 and bit for bit against the AVX2
// table, and in place (dX over dY, as the 16-bit path calls it) with the same bits.
TEST(SimdTables, GeluGrad) {
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n));
      auto x = randv(size_t(n), 17 + unsigned(n), -8.f, 8.f);
      auto dy = randv(size_t(n), 19 + unsigned(n), -2.f, 2.f);
      std::vector<float> dx(x.size()), base(x.size()), in_place = dy;
      t.gelu_grad(dy.data(), x.data(), dx.data(), n);
      simd_for(Isa::Avx2).gelu_grad(dy.data(), x.data(), base.data(), n);
      t.gelu_grad(in_place.data(), x.data(), in_place.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i];
        const double want = dy[i] * (0.5 * std::erfc(-v / std::sqrt(2.0)) +
                                     v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
        ASSERT_NEAR(dx[i], want, 4e-6 * std::max(1.0, std::abs(double(dy[i])))) << "x " << v;
        ASSERT_EQ(dx[i], base[i]) << "x " << v;
        ASSERT_EQ(in_place[i], dx[i]) << "x " << v;
      }
    }
  }
}

// The tanh form's gradient (GPT-2's gelu_new), likewise: against float64, bit for bit against
// the AVX2 table, and in place.
TEST(SimdTables, GeluTanhGrad) {
  const double k = std::sqrt(2 / M_PI), c = 0.044715;
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n));
      auto x = randv(size_t(n), 23 + unsigned(n), -8.f, 8.f);
      auto dy = randv(size_t(n), 29 + unsigned(n), -2.f, 2.f);
      std::vector<float> dx(x.size()), base(x.size()), in_place = dy;
      t.gelu_tanh_grad(dy.data(), x.data(), dx.data(), n);
      simd_for(Isa::Avx2).gelu_tanh_grad(dy.data(), x.data(), base.data(), n);
      t.gelu_tanh_grad(in_place.data(), x.data(), in_place.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[i], th = std::tanh(k * (v + c * v * v * v));
        const double want = dy[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * c * v * v));
        ASSERT_NEAR(dx[i], want, 4e-6 * std::max(1.0, std::abs(double(dy[i])))) << "x " << v;
        ASSERT_EQ(dx[i], base[i]) << "x " << v;
        ASSERT_EQ(in_place[i], dx[i]) << "x " << v;
      }
    }
  }
}

TEST(SimdTables, SoftmaxPieces) {
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n));
      auto x = randv(size_t(n), 11 + unsigned(n), -20.f, 20.f);
      auto m = randv(size_t(n), 13 + unsigned(n), -20.f, 20.f);
      float want_max = -INFINITY;
      for (float v : x) want_max = std::max(want_max, v);
      EXPECT_EQ(t.row_max(x.data(), n), want_max);
      for (bool per_elem : {false, true}) {
        std::vector<float> out(x.size());
        const float shift = n ? want_max : 0.f;
        const float* mp = per_elem ? m.data() : &shift;
        const float sum = t.exp_minus(x.data(), mp, per_elem, out.data(), n);
        double want_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double e = std::exp(double(x[i]) - double(mp[per_elem ? i : 0]));
          want_sum += e;
          ASSERT_NEAR(out[i], e, 2e-6 * std::max(1.0, e)) << i;
        }
        EXPECT_NEAR(sum, want_sum, 1e-5 * std::max(1.0, want_sum));
      }
    }
    std::vector<float> with_nan = {1.f, NAN, 3.f, 2.f};
    EXPECT_EQ(t.row_max(with_nan.data(), 4), 3.f);
    // The whole row, out of place and in place, against float64; every lane's maximum wins
    // (a row of 33 has its maximum in the tail, one of 1000 in a vector's last lane).
    for (int64_t n : kLengths) {
      if (n == 0) continue;
      SCOPED_TRACE(std::string(isa_name(isa)) + " softmax_row n " + std::to_string(n));
      auto x = randv(size_t(n), 17 + unsigned(n), -30.f, 30.f);
      x[size_t(n - 1)] = 40.f;
      std::vector<double> want(x.size());
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += want[i] = std::exp(double(x[i]) - 40.0);
      std::vector<float> y(x.size());
      t.softmax_row(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], want[i] / sum, 2e-7 + 2e-6 * want[i] / sum) << i;
      t.softmax_row(x.data(), x.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], y[i]) << i;
    }
    // add_softmax_row: the same bits as the sum then softmax_row, with a row of M or one value,
    // out of place and in place (a -inf mask entry, as causal masks have, gives an exact 0).
    for (int64_t n : kLengths) {
      if (n == 0) continue;
      for (bool m_row : {true, false}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " add_softmax_row n " + std::to_string(n) +
                     (m_row ? " row" : " value"));
        auto x = randv(size_t(n), 29 + unsigned(n), -30.f, 30.f);
        auto m = randv(m_row ? size_t(n) : 1, 31 + unsigned(n), -5.f, 5.f);
        if (m_row && n > 1) m[0] = -INFINITY;
        std::vector<float> want(x.size());
        for (int64_t i = 0; i < n; ++i) want[i] = x[i] + m[m_row ? i : 0];
        t.softmax_row(want.data(), want.data(), n);
        std::vector<float> y(x.size());
        t.add_softmax_row(x.data(), m.data(), m_row, y.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], want[i]) << i;
        if (m_row && n > 1) {
          ASSERT_EQ(y[0], 0.0f);
        }
        t.add_softmax_row(x.data(), m.data(), m_row, x.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], want[i]) << i;
      }
    }
  }
}

TEST(SimdTables, GemvColumns) {
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (auto [K, N] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {3, 5}, {16, 16}, {33, 70}, {100, 129}, {257, 31}}) {
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " K " + std::to_string(K) + " N " +
                     std::to_string(N) + (trans_b ? " trans_b" : ""));
        auto x = randv(size_t(K), 3);
        auto B = randv(size_t(K * N), 5);
        std::vector<float> y(size_t(N), -1.f);
        // Two column ranges, as two threads take them.
        t.gemv_cols(K, N, x.data(), B.data(), trans_b, y.data(), 0, N / 2);
        t.gemv_cols(K, N, x.data(), B.data(), trans_b, y.data(), N / 2, N);
        for (int64_t j = 0; j < N; ++j) {
          double want = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double b = trans_b ? B[j * K + k] : B[k * N + j];
            want += double(x[k]) * b;
            mag += std::abs(double(x[k]) * b);
          }
          ASSERT_NEAR(y[j], want, 1e-6 * std::max(1.0, mag)) << "column " << j;
        }
      }
    }
  }
}

TEST(SimdTables, OptimizerUpdatesMatchTheScalarLoops) {
  for (Isa isa : supported_isas()) {
    const SimdTable& t = simd_for(isa);
    for (int64_t n : kLengths) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n));
      auto x = randv(size_t(n), 1), g = randv(size_t(n), 2), m = randv(size_t(n), 3);
      auto v = randv(size_t(n), 4, 0.f, 2.f);
      auto close = [n](const std::vector<float>& a, const std::vector<float>& b) {
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(a[i], b[i], 1e-6f * std::max(1.f, std::abs(b[i]))) << i;
      };
      const AdamCoeffs<float> ac{0.9f, 0.999f, 1e-8f, 0.01f, 1e-3f, 1.2f, 0.999f, 1.f};
      std::vector<float> xo(x.size()), mo(x.size()), vo(x.size());
      std::vector<float> xr(x.size()), mr(x.size()), vr(x.size());
      t.adam(x.data(), g.data(), m.data(), v.data(), xo.data(), mo.data(), vo.data(), n, ac);
      scalar::adam_update(x.data(), g.data(), m.data(), v.data(), xr.data(), mr.data(),
                          vr.data(), n, ac);
      close(xo, xr);
      close(mo, mr);
      close(vo, vr);
      for (bool nesterov : {false, true}) {
        const MomentumCoeffs<float> mc{0.1f, 1e-4f, 0.9f, 1.f, nesterov};
        t.momentum(x.data(), g.data(), m.data(), xo.data(), mo.data(), n, mc);
        scalar::momentum_update(x.data(), g.data(), m.data(), xr.data(), mr.data(), n, mc);
        close(xo, xr);
        close(mo, mr);
      }
      t.sgd(x.data(), g.data(), xo.data(), n, 0.05f, 1e-3f);
      scalar::sgd_update(x.data(), g.data(), xr.data(), n, 0.05f, 1e-3f);
      close(xo, xr);
    }
  }
}

// Without weight decay (l2 = 0) a parameter's update must not read it: 0 * inf would turn a
// -inf constant that ends up in the trained set into NaN.
TEST(SimdTables, NoDecayLeavesInfiniteParametersAlone) {
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const SimdTable& t = simd_for(isa);
    std::vector<float> x(17, -INFINITY), g(17, 0.5f), v(17, 0.f), m(17, 0.f), xo(17), vo(17),
        mo(17);
    t.sgd(x.data(), g.data(), xo.data(), 17, 0.1f, 0.f);
    for (float f : xo) EXPECT_EQ(f, -INFINITY);
    t.momentum(x.data(), g.data(), v.data(), xo.data(), vo.data(), 17, {0.1f, 0.f, 0.9f, 1.f, false});
    for (size_t i = 0; i < 17; ++i) EXPECT_EQ(vo[i], 0.5f);
    t.adam(x.data(), g.data(), m.data(), v.data(), xo.data(), mo.data(), vo.data(), 17,
           {0.9f, 0.999f, 1e-8f, 0.f, 1e-3f, 1.f, 1.f, 1.f});
    for (size_t i = 0; i < 17; ++i) EXPECT_FALSE(std::isnan(mo[i]) || std::isnan(vo[i]));
  }
}

}  // namespace
}  // namespace onyx::cpu
