// Winograd 3x3 convolutions (SessionOptions::winograd_convolutions): the NCHWc pass takes the
// Winograd block and marks the 3x3 stride-1 convolutions where they hold enough of the weights,
// the kernel then gets oneDNN's Winograd implementation (CPUs with AVX-512), and the results
// stay within float32 rounding of the direct convolutions'. On CPUs without it (AVX2) the
// graphs are the direct ones.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "inference/optimizer.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/dnnl_util.h"
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

}  // namespace
}  // namespace onyx
