// Winograd 3x3 convolutions (SessionOptions::winograd_convolutions): the NCHWc pass takes the
// Winograd block and marks the 3x3 stride-1 convolutions where they hold enough of the weights,
// the kernel then gets oneDNN's Winograd implementation (CPUs with AVX-512), and the results
// stay within float32 rounding of the direct convolutions'. On CPUs without it (AVX2) the
// pass takes 8-channel blocks and our own F(2x2, 3x3) kernel (kernels/cpu/winograd_conv.h) runs
// them; it is also tested alone here against direct loops, on every CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "inference/optimizer.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/winograd_conv.h"
#include "kernels/cpu/winograd_weights.h"
#include "test_util.h"

namespace onyx {
namespace {

namespace du = cpu::dnnl_util;
using Build = std::function<void(test::ModelBuilder&)>;

using test::randn;



/// The ConvNchwc nodes of the optimized graph, by the name of the Conv they came from (their
/// weights' name less "_w"): their block and whether they are marked for Winograd.
struct Marked {
  int64_t block;
  bool winograd;
};
std::map<std::string, Marked> conv_nodes(const Session& s) {
  std::map<std::string, Marked> out;
  for (const Node* n : s.model().graph->topological_order())
    if (n->op_type == "ConvNchwc")
      out[n->inputs[1]->name.substr(0, n->inputs[1]->name.size() - 2)] = {
          n->attr_int("block", 0), n->attr_int("winograd", 0) == 1};
  return out;
}

/// |got - want| <= tol * max(1, |want|) elementwise.
void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  auto g = got.to_double_vector(), w = want.to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - w[i]) / std::max(1.0, std::abs(w[i])));
  EXPECT_LE(worst, tol);
}

/// A ResNet-style chain: stem 3 -> 32 (3x3 stride 2), two 3x3 stride-1 32 -> 32 with a residual,
/// a 3x3 stride-2 32 -> 64, a 1x1 32 -> 64 shortcut, a dilated 3x3 64 -> 64 and a 3x3 stride-1
/// 64 -> 64.
void chain(test::ModelBuilder& b) {
  b.input("x", DataType::Float,
          SymShape{Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(30), Dim::fixed(30)});
  test::add_conv(b, "x", "stem", 3, 32, 3, 10, 2);
  b.node("Relu", {"stem"}, {"stem_r"});
  test::add_conv(b, "stem_r", "a", 32, 32, 3, 20);
  b.node("Relu", {"a"}, {"a_r"});
  test::add_conv(b, "a_r", "b", 32, 32, 3, 30);
  b.node("Add", {"b", "stem_r"}, {"res"});
  b.node("Relu", {"res"}, {"res_r"});
  test::add_conv(b, "res_r", "down", 32, 64, 3, 40, 2);
  test::add_conv(b, "res_r", "short", 32, 64, 1, 50, 2);
  b.node("Add", {"down", "short"}, {"sum"});
  test::add_conv(b, "sum", "dil", 64, 64, 3, 60, 1, 2);
  b.node("Relu", {"dil"}, {"dil_r"});
  test::add_conv(b, "dil_r", "last", 64, 64, 3, 70);
  b.output("last");
}

TEST(Winograd, PassMarksThe3x3Stride1ConvolutionsWhereTheCpuHasThem) {
  Session s = test::session_at(chain, OptLevel::All, true);
  auto nodes = conv_nodes(s);
  ASSERT_EQ(nodes.size(), 7u);
  const int64_t wblock = du::winograd_block();
  for (const auto& [name, m] : nodes) {
    const bool eligible = name == "a" || name == "b" || name == "last";
    EXPECT_EQ(m.winograd, wblock > 0 && eligible) << name;
    EXPECT_EQ(m.block, wblock > 0 ? wblock : du::nchwc_block()) << name;
  }
  // Off: the CPU's direct layout and no marks.
  for (const auto& [name, m] : conv_nodes(test::session_at(chain, OptLevel::All, false))) {
    EXPECT_FALSE(m.winograd) << name;
    EXPECT_EQ(m.block, du::nchwc_block()) << name;
  }
}

TEST(Winograd, ResultsWithinFloatRoundingOfTheDirectConvolutions) {
  for (int64_t n : {1, 3}) {
    NamedTensors feeds{{"x", randn({n, 3, 30, 30}, 5)}};
    NamedTensors direct = test::session_at(chain, OptLevel::All, false).run(feeds);
    NamedTensors plain = test::session_at(chain, OptLevel::Basic, true).run(feeds);
    NamedTensors wino = test::session_at(chain, OptLevel::All, true).run(feeds);
    // Direct against plain is float32 rounding in another order (measured: equal bits on
    // channels-last, 1.0e-5 of the output's scale on nChw8c); Winograd's transforms add more
    // roundings: 0.8e-5 (batch 1) and 1.5e-5 (batch 3) after four Winograd layers.
    expect_close(direct.at("last"), plain.at("last"), 5e-5);
    expect_close(wino.at("last"), plain.at("last"), 5e-5);
    // Run twice: the same bits (the packed weights are reused, not recomputed).
    NamedTensors again = test::session_at(chain, OptLevel::All, true).run(feeds);
    EXPECT_EQ(again.at("last").to_double_vector(), wino.at("last").to_double_vector());
  }
}

TEST(Winograd, FewEligibleWeightsKeepTheDirectLayout) {
  // One small 3x3 16 -> 16 next to a 1x1 16 -> 256 and a 3x3 stride-2 256 -> 256: Winograd
  // could run 0.4 % of the weights, not worth the other convolutions' slower layout.
  auto build = [](test::ModelBuilder& b) {
    b.input("x", DataType::Float, {1, 16, 12, 12});
    test::add_conv(b, "x", "small", 16, 16, 3, 10);
    test::add_conv(b, "small", "wide", 16, 256, 1, 20);
    test::add_conv(b, "wide", "big", 256, 256, 3, 30, 2);
    b.output("big");
  };
  for (const auto& [name, m] : conv_nodes(test::session_at(build, OptLevel::All, true))) {
    EXPECT_FALSE(m.winograd) << name;
    EXPECT_EQ(m.block, du::nchwc_block()) << name;
  }
}

TEST(Winograd, KernelGetsOneDnnsWinogradImplementation) {
  // ResNet's stage shapes (channels x spatial), batch 1 and 4, with bias, a residual and ReLU
  // as post-ops; the direct entry for comparison.
  struct Shape4 {
    int64_t n, c, hw;
  };
  for (Shape4 sh : {Shape4{1, 64, 56}, Shape4{1, 128, 28}, Shape4{4, 256, 14}, Shape4{1, 512, 7}}) {
    cpu::Geometry g;
    g.N = sh.n, g.C = sh.c, g.M = sh.c;
    g.in = g.out = {sh.hw, sh.hw};
    g.k = {3, 3}, g.stride = {1, 1}, g.dil = {1, 1}, g.pad_l = {1, 1}, g.pad_r = {1, 1};
    cpu::ConvSpec spec{.has_bias = true, .has_sum = true, .layout = {16, 16}};
    spec.act.kind = cpu::Activation::Kind::Relu;
    spec.winograd = true;
    cpu::ConvEntry wino = cpu::make_conv_entry(g, spec);
    spec.winograd = false;
    cpu::ConvEntry direct = cpu::make_conv_entry(g, spec);
    ASSERT_TRUE(wino.ok && direct.ok);
    const bool has = du::has_winograd_kernels();
    EXPECT_EQ(wino.impl.find("wino") != std::string::npos, has)
        << wino.impl << " for " << sh.c << "x" << sh.hw;
    EXPECT_EQ(direct.impl.find("wino"), std::string::npos) << direct.impl;
  }
}

TEST(Winograd, OurWeightTransformWritesWhatOneDnnsReorderWrites) {
  if (!du::has_winograd_kernels()) {
    // No Winograd layout to write on this CPU: the kernel keeps oneDNN's reorder (never ours).
    EXPECT_FALSE(cpu::can_transform_winograd_weights(
        dnnl::memory::desc({16, 16, 3, 3}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::oihw),
        dnnl::memory::desc({16, 16, 3, 3}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::OIhw16i16o)));
    return;
  }
  // ResNet's stage widths, unequal in and out channels, and a shape whose channels oneDNN pads.
  struct Case {
    int64_t m, c, hw;
  };
  for (Case k : {Case{64, 64, 56}, Case{128, 128, 28}, Case{256, 128, 14}, Case{512, 512, 7},
                 Case{48, 80, 10}, Case{40, 24, 10}}) {
    SCOPED_TRACE(std::to_string(k.m) + " x " + std::to_string(k.c));
    cpu::Geometry g;
    g.N = 1, g.C = k.c, g.M = k.m;
    g.in = g.out = {k.hw, k.hw};
    g.k = {3, 3}, g.stride = {1, 1}, g.dil = {1, 1}, g.pad_l = {1, 1}, g.pad_r = {1, 1};
    cpu::ConvSpec spec{.has_bias = true, .layout = {16, 16}};
    spec.winograd = true;
    cpu::ConvEntry e = cpu::make_conv_entry(g, spec);
    ASSERT_TRUE(e.ok);
    if (e.impl.find("wino") == std::string::npos) continue;  // oneDNN took the direct kernel
    ASSERT_TRUE(e.wei_r.has_value());
    ASSERT_TRUE(e.wino_weights) << "the Winograd entry should use our transform";
    ASSERT_TRUE(cpu::can_transform_winograd_weights(e.wei_u, e.wei_p));
    Tensor w = randn({k.m, k.c, 3, 3}, 7, 0.1);
    const size_t bytes = e.wei_p.get_size();
    std::vector<float> theirs(bytes / sizeof(float), -1.f), ours(bytes / sizeof(float), -2.f);
    dnnl::stream s(du::engine());
    dnnl::memory from = du::wrap(e.wei_u, w.raw()), to = du::wrap(e.wei_p, theirs.data());
    dnnl::reorder(from, to).execute(s, from, to);
    s.wait();
    for (int threads : {1, 2}) {
      cpu::transform_winograd_weights(w.data<float>(), k.m, k.c, e.wei_p, ours.data(), threads);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < ours.size(); ++i) {
        worst = std::max(worst, std::abs(double(ours[i]) - double(theirs[i])));
        scale = std::max(scale, std::abs(double(theirs[i])));
      }
      EXPECT_GT(scale, 0.0);
      EXPECT_LE(worst, 1e-6 * scale) << "threads " << threads;
    }
  }
  // Not our layout: a blocked (direct) weights layout, or a source that is not plain OIHW.
  const dnnl::memory::desc oihw({64, 64, 3, 3}, dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::oihw);
  EXPECT_FALSE(cpu::can_transform_winograd_weights(
      oihw, dnnl::memory::desc({64, 64, 3, 3}, dnnl::memory::data_type::f32,
                               dnnl::memory::format_tag::OIhw16i16o)));
}

/// One case of our own F(2x2, 3x3) kernel: batch, input and output channels, image, pads (top,
/// left, bottom, right), bias, residual and activation.
struct OwnCase {
  int64_t n, c, m, h, w;
  std::array<int64_t, 4> pads;
  bool bias, z;
  cpu::Activation::Kind act;
};

/// [N, C, H, W] into [N, ceil(C/8), H, W, 8], channels past C zero.
std::vector<float> to_blocked8(const Tensor& x) {
  const int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3), C8 = (C + 7) / 8;
  std::vector<float> out(N * C8 * HW * 8, 0.f);
  const float* p = x.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i)
        out[((n * C8 + c / 8) * HW + i) * 8 + c % 8] = p[(n * C + c) * HW + i];
  return out;
}

TEST(Winograd, OwnKernelMatchesDirectLoopsOnBlockedTensors) {
  using K = cpu::Activation::Kind;
  // Partial tiles (odd outputs), asymmetric and zero pads, a 1x1 image, input channels that are
  // not a multiple of 8 (padded), output panels of 8 (24 = 16 + 8), a batch, and enough tiles
  // and channels for several chunks; every epilogue the kernel applies.
  const OwnCase cases[] = {
      {1, 16, 16, 9, 9, {1, 1, 1, 1}, true, false, K::Relu},
      {2, 5, 24, 7, 10, {0, 2, 1, 0}, true, true, K::None},
      {1, 40, 8, 1, 1, {1, 1, 1, 1}, false, false, K::None},
      {3, 8, 32, 6, 5, {0, 0, 0, 0}, true, true, K::Relu},
      {2, 200, 16, 30, 30, {1, 1, 1, 1}, true, false, K::LeakyRelu},
      {1, 64, 72, 12, 13, {2, 1, 0, 2}, false, true, K::Clip},
  };
  for (const OwnCase& k : cases) {
    SCOPED_TRACE(fmt::format("n {} c {} m {} {}x{}", k.n, k.c, k.m, k.h, k.w));
    cpu::Geometry g;
    g.N = k.n, g.C = k.c, g.M = k.m;
    g.in = {k.h, k.w};
    g.out = {k.h + k.pads[0] + k.pads[2] - 2, k.w + k.pads[1] + k.pads[3] - 2};
    g.k = {3, 3}, g.stride = {1, 1}, g.dil = {1, 1};
    g.pad_l = {k.pads[0], k.pads[1]}, g.pad_r = {k.pads[2], k.pads[3]};
    ASSERT_TRUE(cpu::winograd_suits(g));
    cpu::Activation act;
    act.kind = k.act;
    act.alpha = k.act == K::Clip ? -0.5f : 0.1f;
    act.beta = 0.5f;
    const int64_t OH = g.out[0], OW = g.out[1], M8 = k.m / 8;
    Tensor x = randn({k.n, k.c, k.h, k.w}, 11), w = randn({k.m, k.c, 3, 3}, 12, 0.3),
           b = randn({k.m}, 13), z = randn({k.n, k.m, OH, OW}, 14);
    // Direct loops in double.
    std::vector<double> want(k.n * k.m * OH * OW);
    double scale = 0;  // of the sums before the activation: a clip hides their rounding's size
    const float *xp = x.data<float>(), *wp = w.data<float>();
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t m = 0; m < k.m; ++m)
        for (int64_t oy = 0; oy < OH; ++oy)
          for (int64_t ox = 0; ox < OW; ++ox) {
            double s = k.bias ? b.data<float>()[m] : 0.0;
            for (int64_t c = 0; c < k.c; ++c)
              for (int64_t i = 0; i < 3; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                  const int64_t iy = oy + i - k.pads[0], ix = ox + j - k.pads[1];
                  if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                  s += double(xp[((n * k.c + c) * k.h + iy) * k.w + ix]) *
                       wp[((m * k.c + c) * 3 + i) * 3 + j];
                }
            const int64_t at = ((n * k.m + m) * OH + oy) * OW + ox;
            if (k.z) s += z.data<float>()[at];
            scale = std::max(scale, std::abs(s));
            want[at] = act.apply(s);
          }
    const std::vector<float> xb = to_blocked8(x), zb = to_blocked8(z);
    for (int tile : {2, 4}) {
      for (int threads : {1, 2, 3}) {
        std::vector<float> u(cpu::winograd_weights_numel(tile, k.m, k.c), -1.f);
        cpu::winograd_pack_weights(tile, wp, k.m, k.c, u.data(), threads);
        std::vector<float> y(k.n * M8 * OH * OW * 8, std::nanf("")),
            scratch(cpu::winograd_scratch_numel(tile, g, threads));
        cpu::winograd_conv(tile, g, xb.data(), u.data(), k.bias ? b.data<float>() : nullptr,
                           k.z ? zb.data() : nullptr, y.data(), act, scratch.data(), threads);
        double worst = 0;
        int64_t unwritten = 0;  // still the NaN y was filled with
        for (int64_t n = 0; n < k.n; ++n)
          for (int64_t m = 0; m < k.m; ++m)
            for (int64_t i = 0; i < OH * OW; ++i) {
              const double got = y[((n * M8 + m / 8) * OH * OW + i) * 8 + m % 8];
              if (std::isnan(got)) ++unwritten;
              else worst = std::max(worst, std::abs(got - want[(n * k.m + m) * OH * OW + i]));
            }
        // Measured: F(2x2) within 5e-7 of the sums' scale, F(4x4) within 8e-6 (its larger
        // transform constants round more).
        EXPECT_EQ(unwritten, 0) << "tile " << tile << ", threads " << threads;
        EXPECT_LE(worst, (tile == 2 ? 2e-6 : 2e-5) * scale)
            << "tile " << tile << ", threads " << threads;
      }
    }
  }
}

TEST(Winograd, OwnKernelTakesOnlyWhatItComputes) {
  cpu::Geometry g;
  g.N = 1, g.C = 16, g.M = 16;
  g.in = g.out = {8, 8};
  g.k = {3, 3}, g.stride = {1, 1}, g.dil = {1, 1}, g.pad_l = {1, 1}, g.pad_r = {1, 1};
  EXPECT_TRUE(cpu::winograd_suits(g));
  cpu::Geometry other = g;
  other.stride = {2, 2};
  EXPECT_FALSE(cpu::winograd_suits(other));
  other = g, other.dil = {1, 2};
  EXPECT_FALSE(cpu::winograd_suits(other));
  other = g, other.k = {3, 1};
  EXPECT_FALSE(cpu::winograd_suits(other));
  other = g, other.G = 2;
  EXPECT_FALSE(cpu::winograd_suits(other));
  other = g, other.M = 12;  // not whole 8-channel blocks
  EXPECT_FALSE(cpu::winograd_suits(other));
  // F(4x4) from 16 tiles of 4x4 over the batch (ResNet's 14x14 on), F(2x2) below (its 7x7).
  other = g, other.out = {14, 14};
  EXPECT_EQ(cpu::winograd_tile(other), 4);
  other.out = {7, 7};
  EXPECT_EQ(cpu::winograd_tile(other), 2);
  other.N = 4;
  EXPECT_EQ(cpu::winograd_tile(other), 4);
  // A tile outside {2, 4} is refused, not run.
  EXPECT_THROW(cpu::winograd_weights_numel(3, 16, 16), Error);
}

TEST(Winograd, OwnKernelTransformsWeightsThatAreNotConstantOnEveryRun) {
  // A ConvNchwc marked for Winograd on 8-channel blocks whose W is a graph input (a model saved
  // optimized, its weights fed): the kernel transforms W in each run, and a second run with
  // other weights gives that run's convolution, equal to the plain Conv's.
  auto build = [](bool blocked) {
    return [blocked](test::ModelBuilder& b) {
      b.input("x", DataType::Float, Shape{1, 16, 9, 9});
      b.input("w", DataType::Float, Shape{24, 16, 3, 3});
      b.initializer("bias", randn({24}, 9));
      if (!blocked) {
        Node& c = b.node("Conv", {"x", "w", "bias"}, {"y"});
        c.attrs["pads"] = test::attr_ints("pads", {1, 1, 1, 1});
      } else {
        Node& to = b.node("ToNchwc", {"x"}, {"xb"}, "ai.onyx");
        to.attrs["block"] = test::attr_int("block", 8);
        Node& c = b.node("ConvNchwc", {"xb", "w", "bias"}, {"yb"}, "ai.onyx");
        c.attrs["pads"] = test::attr_ints("pads", {1, 1, 1, 1});
        c.attrs["block"] = test::attr_int("block", 8);
        c.attrs["winograd"] = test::attr_int("winograd", 1);
        c.attrs["activation"] = test::attr_string("activation", "Relu");
        Node& from = b.node("FromNchwc", {"yb"}, {"yr"}, "ai.onyx");
        from.attrs["channels"] = test::attr_int("channels", 24);
        b.node("Identity", {"yr"}, {"y"});
      }
      if (!blocked) {
        b.node("Relu", {"y"}, {"yr"});
        b.output("yr");
      } else {
        b.output("y");
      }
    };
  };
  auto session = [](const std::function<void(test::ModelBuilder&)>& f) {
    test::ModelBuilder b(17, "ai.onyx");
    f(b);
    SessionOptions opts;
    opts.opt_level = OptLevel::None;  // the graph as written
    return b.session(opts);
  };
  Session wino = session(build(true)), plain = session(build(false));
  for (uint32_t seed : {21u, 22u}) {
    NamedTensors feeds{{"x", randn({1, 16, 9, 9}, seed)},
                       {"w", randn({24, 16, 3, 3}, seed + 10, 0.2)}};
    const Tensor got = wino.run(feeds).begin()->second, want = plain.run(feeds).begin()->second;
    expect_close(got, want, 2e-5);
  }
}

}  // namespace
}  // namespace onyx
