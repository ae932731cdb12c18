// Double Conv and ConvTranspose (im2col + our gemm, kernels/cpu/conv_gemm.cpp) against the
// float32 kernels (oneDNN, or the direct loops where oneDNN cannot: negative pads) on the same
// inputs: strides, dilations, asymmetric and negative pads, groups, 1-D to 3-D, bias, and the
// weight-gradient shape (a large kernel with a tiny output) that gradient checks run most.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace onyx {
namespace {

using test::attr_int;
using test::attr_ints;

Tensor random_float(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector<float>(s, v);
}

Tensor as_double(const Tensor& t) { return Tensor::from_vector<double>(t.shape(), t.to_double_vector()); }

struct Case {
  std::string op;
  Shape x, w;
  std::vector<Attribute> attrs;
  bool bias = false;
};

void expect_double_matches_float(const Case& c, uint32_t seed) {
  Tensor x = random_float(c.x, seed), w = random_float(c.w, seed + 1);
  int64_t out_channels = c.op == "Conv" ? c.w[0] : c.w[1];
  for (const Attribute& a : c.attrs)
    if (a.name == "group" && c.op == "ConvTranspose") out_channels *= a.i;
  test::Named f{{"x", x}, {"w", w}}, d{{"x", as_double(x)}, {"w", as_double(w)}};
  if (c.bias) {
    Tensor b = random_float({out_channels}, seed + 2);
    f.emplace_back("b", b);
    d.emplace_back("b", as_double(b));
  }
  Tensor yf = test::run_op(c.op, f, c.attrs, 1, 17).at("y0");
  Tensor yd = test::run_op(c.op, d, c.attrs, 1, 17).at("y0");
  ASSERT_EQ(yd.dtype(), DataType::Double);
  ASSERT_EQ(yd.shape(), yf.shape()) << c.op << " " << shape_str(c.x) << " * " << shape_str(c.w);
  auto a = yf.to_double_vector(), b = yd.to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LT(worst, 1e-4) << c.op << " " << shape_str(c.x) << " * " << shape_str(c.w);
}

TEST(ConvDouble, ConvMatchesFloat32) {
  const std::vector<Case> cases = {
      {"Conv", {2, 4, 7, 6}, {6, 4, 3, 3}, {attr_ints("pads", {1, 1, 1, 1})}, true},
      {"Conv", {1, 3, 9, 8}, {5, 3, 3, 2},
       {attr_ints("strides", {2, 1}), attr_ints("dilations", {2, 2}), attr_ints("pads", {1, 0, 2, 1})}},
      {"Conv", {2, 6, 5, 5}, {4, 3, 3, 3}, {attr_int("group", 2)}, true},
      {"Conv", {1, 4, 6, 6}, {4, 1, 3, 3}, {attr_int("group", 4), attr_ints("pads", {1, 1, 1, 1})}},
      {"Conv", {2, 3, 10}, {4, 3, 3}, {attr_ints("strides", {2}), attr_ints("pads", {1, 1})}, true},
      {"Conv", {1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {attr_ints("pads", {0, 1, 1, 0, 1, 0})}},
      // The weight gradient of a 3x3 conv: the activations as the kernel, a 3x3 output.
      {"Conv", {3, 5, 8, 8}, {2, 5, 8, 8}, {attr_ints("pads", {1, 1, 1, 1})}},
      {"Conv", {1, 3, 16, 16}, {4, 3, 7, 7}, {attr_ints("strides", {2, 2}), attr_ints("pads", {3, 3, 3, 3})}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) expect_double_matches_float(c, seed += 10);
}

TEST(ConvDouble, ConvTransposeMatchesFloat32) {
  const std::vector<Case> cases = {
      {"ConvTranspose", {2, 4, 5, 5}, {4, 3, 3, 3},
       {attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1}), attr_ints("output_padding", {1, 1})}, true},
      {"ConvTranspose", {1, 6, 4, 4}, {6, 2, 3, 3}, {attr_int("group", 3), attr_ints("dilations", {2, 2})}, true},
      {"ConvTranspose", {1, 3, 6}, {3, 2, 4}, {attr_ints("strides", {3})}},
      {"ConvTranspose", {1, 2, 3, 3, 2}, {2, 2, 2, 2, 2}, {attr_ints("strides", {2, 1, 2})}},
      // output_shape larger than the full result: negative pads (the direct loops in float32).
      {"ConvTranspose", {1, 2, 3, 3}, {2, 2, 3, 3}, {attr_ints("output_shape", {7, 7})}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) expect_double_matches_float(c, seed += 10);
}

}  // namespace
}  // namespace onyx
