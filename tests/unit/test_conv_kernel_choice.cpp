// Which oneDNN convolution a plain-layout float32 Conv gets (kernels/cpu/conv_dnnl.cpp,
// prefer_blocked_direct): batches > 1 and 1x1 kernels take the direct kernel on 16-channel blocks
// rather than brgconv on channels-last (2.3x faster on ResNet's last stage in training), and the
// results of that kernel match a float64 reference.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/conv.h"
#include "test_util.h"

namespace onyx {
namespace {

using test::attr_ints;

cpu::Geometry square_conv(int64_t n, int64_t c, int64_t m, int64_t hw, int64_t k, int64_t stride) {
  cpu::Geometry g;
  g.N = n, g.C = c, g.M = m;
  const int64_t pad = k / 2;
  g.in = {hw, hw};
  g.out = {(hw + 2 * pad - k) / stride + 1, (hw + 2 * pad - k) / stride + 1};
  g.k = {k, k}, g.stride = {stride, stride}, g.dil = {1, 1}, g.pad_l = {pad, pad},
  g.pad_r = {pad, pad};
  return g;
}

TEST(ConvKernelChoice, BatchesAndOneByOneKernelsLeaveBrgconv) {
  // ResNet-18's training shapes at batch 16, a 1x1 downsample, and a 1x1 at batch 1. On AVX2
  // there is no brgconv at all; on AVX-512 oneDNN 2.6 would take it for each of these.
  const cpu::Geometry cases[] = {square_conv(16, 512, 512, 2, 3, 1), square_conv(16, 256, 512, 4, 3, 2),
                                 square_conv(4, 64, 64, 8, 3, 1), square_conv(16, 256, 512, 4, 1, 2),
                                 square_conv(1, 256, 128, 7, 1, 1)};
  for (const cpu::Geometry& g : cases) {
    SCOPED_TRACE(fmt::format("N {} C {} M {} {}x{} k {}", g.N, g.C, g.M, g.in[0], g.in[1], g.k[0]));
    for (bool bias : {false, true}) {
      cpu::ConvSpec spec{.has_bias = bias};
      spec.act.kind = cpu::Activation::Kind::Relu;
      cpu::ConvEntry e = cpu::make_conv_entry(g, spec);
      ASSERT_TRUE(e.ok) << e.why;
      EXPECT_NE(e.impl.rfind("brgconv", 0), 0u) << e.impl;
      EXPECT_EQ(e.impl.find("ref"), std::string::npos) << e.impl;
    }
  }
}

/// y = conv(x, w) + b in float64, NCHW, square pads k/2.
std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), K = w.dim(2);
  const int64_t pad = K / 2, OH = (H + 2 * pad - K) / stride + 1, OW = (W + 2 * pad - K) / stride + 1;
  auto xv = x.to_double_vector(), wv = w.to_double_vector(), bv = b.to_double_vector();
  std::vector<double> y(static_cast<size_t>(N * M * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = bv[m];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += xv[((n * C + c) * H + ih) * W + iw] * wv[((m * C + c) * K + kh) * K + kw];
              }
          y[((n * M + m) * OH + oh) * OW + ow] = s;
        }
  return y;
}

TEST(ConvKernelChoice, BlockedDirectResultsMatchTheDefinition) {
  struct Case {
    Shape x;
    int64_t m, k, stride;
  };
  // Channels not a multiple of 16 too: the blocked layout pads them.
  const Case cases[] = {{{16, 32, 2, 2}, 48, 3, 1}, {{4, 24, 5, 5}, 40, 3, 2}, {{3, 20, 4, 4}, 36, 1, 2},
                        {{1, 64, 3, 3}, 16, 1, 1}};
  uint32_t seed = 5;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " k " + std::to_string(c.k));
    Tensor x = test::randn(c.x, ++seed, 1.0), w = test::randn({c.m, c.x[1], c.k, c.k}, ++seed, 0.2),
           b = test::randn({c.m}, ++seed, 0.5);
    const int64_t pad = c.k / 2;
    Tensor y = test::run_op("Conv", {{"x", x}, {"w", w}, {"b", b}},
                            {attr_ints("strides", {c.stride, c.stride}), attr_ints("pads", {pad, pad, pad, pad})},
                            1, 17)
                   .at("y0");
    auto want = reference(x, w, b, c.stride), got = y.to_double_vector();
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    EXPECT_LT(worst, 1e-4);
  }
}

}  // namespace
}  // namespace onyx
