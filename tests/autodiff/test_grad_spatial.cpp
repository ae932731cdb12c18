// Finite-difference checks of the spatial resampling gradient rules (float64): Resize (nearest,
// linear, cubic; every coordinate_transformation_mode; up- and downsampling; scales and sizes;
// 1-D, 2-D and 3-D; axes, antialias, tf_crop_and_resize) and Upsample (opset 7 and 9, trained
// through its Resize form); GridSample (bilinear and nearest, zeros and border padding,
// align_corners, 1-D to 3-D), with gradients to X and to the grid.
#include <cmath>
#include <random>

#include "grad_check.h"

namespace onyx::test {

namespace {

using test::attr_float;
using test::attr_int;
using test::attr_ints;
using test::attr_string;
using test::attr_floats;

GradInput floats(std::string n, std::vector<double> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return C(std::move(n), s, std::move(v), DataType::Float);
}

/// Resize(x, roi omitted, scales) at `opset`.
void by_scales(Shape xs, std::vector<double> scales, std::vector<Attribute> attrs,
               int64_t opset = 13) {
  check_gradient({.op = "Resize",
                  .inputs = {P("x", std::move(xs)), None(), floats("scales", std::move(scales))},
                  .attrs = std::move(attrs),
                  .opset = opset});
}

/// Resize(x, roi omitted, scales omitted, sizes) at `opset`.
void by_sizes(Shape xs, std::vector<double> sizes, std::vector<Attribute> attrs,
              int64_t opset = 13) {
  Shape ss{static_cast<int64_t>(sizes.size())};
  check_gradient({.op = "Resize",
                  .inputs = {P("x", std::move(xs)), None(), None(),
                             C("sizes", ss, std::move(sizes))},
                  .attrs = std::move(attrs),
                  .opset = opset});
}

Attribute mode(const char* m) { return attr_string("mode", m); }
Attribute coord(const char* m) { return attr_string("coordinate_transformation_mode", m); }

const char* kCoords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"};

}  // namespace

TEST(GradSpatial, ResizeNearest) {
  for (const char* ct : kCoords) {
    SCOPED_TRACE(ct);
    by_scales({1, 2, 3, 4}, {1, 1, 2, 2}, {mode("nearest"), coord(ct)});
    by_scales({2, 1, 5, 6}, {1, 1, 0.6, 0.5}, {mode("nearest"), coord(ct)});  // downsampling
    by_sizes({1, 2, 3, 4}, {1, 2, 7, 5}, {mode("nearest"), coord(ct)});
  }
  // torch's nearest: asymmetric coordinates, floor.
  by_scales({1, 1, 3, 3}, {1, 1, 3, 2},
            {mode("nearest"), coord("asymmetric"), attr_string("nearest_mode", "floor")});
  by_scales({1, 1, 4, 3}, {1, 1, 1.5, 2.5},
            {mode("nearest"), attr_string("nearest_mode", "round_prefer_ceil")});
}

TEST(GradSpatial, ResizeLinear) {
  for (const char* ct : kCoords) {
    SCOPED_TRACE(ct);
    by_scales({1, 2, 3, 4}, {1, 1, 2, 2}, {mode("linear"), coord(ct)});
    by_scales({1, 2, 3, 4}, {1, 1, 1.5, 2.5}, {mode("linear"), coord(ct)});
    by_scales({2, 1, 6, 7}, {1, 1, 0.5, 0.6}, {mode("linear"), coord(ct)});  // downsampling
    by_sizes({1, 2, 4, 3}, {1, 2, 3, 8}, {mode("linear"), coord(ct)});
  }
}

TEST(GradSpatial, ResizeLinear1DAnd3D) {
  by_scales({2, 3, 5}, {1, 1, 2.5}, {mode("linear"), coord("align_corners")});
  by_sizes({1, 2, 6}, {1, 2, 4}, {mode("linear")});
  by_scales({1, 2, 2, 3, 3}, {1, 1, 2, 1.5, 0.7}, {mode("linear"), coord("pytorch_half_pixel")});
  by_scales({1, 1, 3, 2, 4}, {1, 1, 2, 2, 2}, {mode("nearest")});
}

TEST(GradSpatial, ResizeCubicAndExcludeOutside) {
  by_scales({1, 1, 4, 5}, {1, 1, 2, 1.5}, {mode("cubic")});
  by_scales({1, 2, 4, 4}, {1, 1, 1.5, 0.75},
            {mode("cubic"), attr_int("exclude_outside", 1), attr_float("cubic_coeff_a", -0.5)});
}

TEST(GradSpatial, ResizeOpset18AxesAntialiasAndOpset19) {
  // Only the last two axes listed: scales has two entries.
  by_scales({2, 2, 4, 5}, {2, 0.6}, {mode("linear"), attr_ints("axes", {2, 3})}, 18);
  by_sizes({2, 3, 4}, {6}, {mode("nearest"), attr_ints("axes", {-1})}, 18);
  by_scales({1, 1, 8, 7}, {1, 1, 0.5, 0.6}, {mode("linear"), attr_int("antialias", 1)}, 18);
  by_scales({1, 1, 5, 6}, {1, 1, 0.6, 0.5}, {mode("cubic"), attr_int("antialias", 1)}, 18);
  by_scales({1, 1, 3, 4}, {1, 1, 1.7, 2.2}, {mode("linear"), coord("half_pixel_symmetric")}, 19);
}

TEST(GradSpatial, ResizeTfCropAndResize) {
  // Outputs outside the crop take extrapolation_value, which does not depend on x.
  check_gradient({.op = "Resize",
                  .inputs = {P("x", {1, 1, 4, 5}),
                             floats("roi", {0, 0, -0.2, 0.1, 1, 1, 0.8, 1.3}),
                             floats("scales", {1, 1, 1.5, 1.2})},
                  .attrs = {mode("linear"), coord("tf_crop_and_resize"),
                            attr_float("extrapolation_value", 2.5)}});
}

// Scales computed at run time: the rule cannot tell which axes are left alone and resizes every
// axis (batch and channels by 1, an identity matrix).
TEST(GradSpatial, ResizeRunTimeScales) {
  GradCase gc{.op = "Resize",
              .inputs = {P("x", {2, 3, 3, 4}), floats("s", {1, 1, 2, 1.5})},
              .opset = 13};
  gc.build = [](Graph& g) -> std::vector<Value*> {
    Value* s = add(g, "Identity", {g.find_value("s")});
    return {add(g, "Resize", {g.find_value("x"), nullptr, s},
                {mode("linear"), coord("asymmetric")})};
  };
  check_gradient(gc);
}

TEST(GradSpatial, UpsampleOpset7And9) {
  for (const char* m : {"nearest", "linear"}) {
    SCOPED_TRACE(m);
    check_gradient({.op = "Upsample",
                    .inputs = {P("x", {1, 2, 3, 3})},
                    .attrs = {mode(m), attr_floats("scales", {1, 1, 2, 3})},
                    .opset = 7});
    check_gradient({.op = "Upsample",
                    .inputs = {P("x", {1, 2, 3, 2}), floats("scales", {1, 1, 2.5, 2})},
                    .attrs = {mode(m)},
                    .opset = 9});
  }
  // Resize-10: (X, scales), asymmetric coordinates.
  check_gradient({.op = "Resize",
                  .inputs = {P("x", {1, 1, 4, 3}), floats("scales", {1, 1, 0.5, 2})},
                  .attrs = {mode("linear")},
                  .opset = 10});
}

TEST(GradSpatial, ResizeKeepAspectRatioIsRefused) {
  try {
    by_sizes({1, 1, 4, 6}, {1, 1, 8, 8},
             {mode("linear"), attr_string("keep_aspect_ratio_policy", "not_larger")}, 18);
    ADD_FAILURE() << "no error for keep_aspect_ratio_policy";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keep_aspect_ratio_policy"), std::string::npos)
        << e.what();
  }
}

}  // namespace onyx::test

// ---------------------------------------------------------------- GridSample

namespace onyx::test {

namespace {

/// Grid values for X's spatial `sizes` ([N, points..., r], the innermost axis first): pixel
/// coordinates from -1.3 to size + 0.3 (some outside X), kept 0.1 from where a tap changes
/// (integers; half-integers for nearest), so central differences stay inside one cell.
std::vector<double> grid_values(int64_t count, const std::vector<int64_t>& sizes, bool align,
                                bool nearest, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t r = static_cast<int64_t>(sizes.size());
  std::vector<double> v;
  for (int64_t p = 0; p < count; ++p)
    for (int64_t k = 0; k < r; ++k) {
      const double s = static_cast<double>(sizes[r - 1 - k]);
      double px = std::uniform_real_distribution<double>(-1.3, s + 0.3)(rng);
      const double base = nearest ? px - 0.5 : px, f = base - std::floor(base);
      if (f < 0.1) px += 0.1;
      if (f > 0.9) px -= 0.1;
      v.push_back(align ? 2 * px / (s - 1) - 1 : (2 * px + 1) / s - 1);
    }
  return v;
}

/// GridSample of x [N, C, sizes...] at a grid [N, points..., r], both parameters.
void grid_sample(Shape xs, Shape gs, const char* mode, const char* padding, int align,
                 int64_t opset) {
  std::vector<int64_t> sizes(xs.begin() + 2, xs.end());
  int64_t count = shape_numel(gs) / static_cast<int64_t>(sizes.size());
  bool nearest = std::string(mode) == "nearest";
  GradInput grid = PV("grid", gs, grid_values(count, sizes, align != 0, nearest, 7));
  GradCase gc{.op = "GridSample",
              .inputs = {P("x", xs), grid},
              .attrs = {attr_string("mode", mode), attr_string("padding_mode", padding),
                        attr_int("align_corners", align)},
              .opset = opset};
  // The kernel computes coordinates in float32: a wide eps keeps its rounding small, and
  // linear sampling is linear in each coordinate inside a cell, so the difference is exact.
  gc.eps = 1e-2, gc.rtol = 1e-4, gc.atol = 1e-5;
  check_gradient(gc);
}

}  // namespace

TEST(GradSpatial, GridSampleBilinear) {
  for (const char* pad : {"zeros", "border"})
    for (int align : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} align_corners={}", pad, align));
      grid_sample({2, 2, 4, 5}, {2, 3, 2, 2}, "bilinear", pad, align, 16);
      grid_sample({1, 3, 3, 4}, {1, 2, 4, 2}, "linear", pad, align, 20);
    }
}

TEST(GradSpatial, GridSampleNearest) {
  // The grid's gradient is zero: the taps do not move inside a cell.
  for (const char* pad : {"zeros", "border"})
    for (int align : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} align_corners={}", pad, align));
      grid_sample({2, 2, 4, 5}, {2, 3, 2, 2}, "nearest", pad, align, 16);
    }
}

TEST(GradSpatial, GridSampleVolumetricAnd1D) {
  grid_sample({1, 2, 3, 4, 3}, {1, 2, 2, 2, 3}, "linear", "zeros", 0, 20);
  grid_sample({1, 2, 3, 4, 3}, {1, 3, 1, 2, 3}, "linear", "border", 1, 20);
  grid_sample({2, 2, 5}, {2, 4, 1}, "linear", "zeros", 1, 20);
}

TEST(GradSpatial, GridSampleReflectionAndCubicAreRefused) {
  for (auto [mode, pad] : {std::pair{"bilinear", "reflection"}, std::pair{"bicubic", "zeros"}}) {
    try {
      grid_sample({1, 1, 3, 3}, {1, 2, 2, 2}, mode, pad, 0, 16);
      ADD_FAILURE() << "no error for " << mode << " " << pad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gradient supports"), std::string::npos) << e.what();
    }
  }
}

}  // namespace onyx::test

namespace onyx::test {

// The rules emit float32 nodes for float32 models.
TEST(GradSpatial, Float32) {
  check_gradient(in_float32({.op = "Resize",
                             .inputs = {P("x", {1, 2, 3, 4}), None(),
                                        C("scales", {4}, {1, 1, 2, 1.5}, DataType::Float)},
                             .attrs = {attr_string("mode", "linear")},
                             .opset = 13}));
  GradCase gs{.op = "GridSample",
              .inputs = {P("x", {1, 2, 4, 5}),
                         PV("grid", {1, 2, 3, 2}, grid_values(6, {4, 5}, false, false, 3))},
              .attrs = {attr_string("mode", "bilinear")},
              .opset = 16};
  check_gradient(in_float32(gs));
}

// A decoder-style chain: Conv -> Resize (nearest 2x) -> Conv -> GridSample. The rules after a
// Conv see its rank from shape inference, its spatial sizes only at run time.
TEST(GradSpatial, AfterConvolutions) {
  GradCase gc{.op = "Resize",
              .inputs = {P("x", {1, 2, 3, 3}), P("w1", {2, 2, 3, 3}), P("w2", {1, 2, 3, 3}),
                         C("scales", {4}, {1, 1, 2, 2}, DataType::Float),
                         PV("grid", {1, 2, 3, 2}, grid_values(6, {6, 6}, true, false, 5))},
              .opset = 20};
  gc.eps = 1e-2, gc.rtol = 1e-4, gc.atol = 1e-5;  // the grid's float32 coordinates
  gc.build = [](Graph& g) -> std::vector<Value*> {
    auto pads = attr_ints("pads", {1, 1, 1, 1});
    Value* h = add(g, "Conv", {g.find_value("x"), g.find_value("w1")}, {pads});
    h = add(g, "Resize", {h, nullptr, g.find_value("scales")}, {attr_string("mode", "nearest")});
    h = add(g, "Conv", {h, g.find_value("w2")}, {pads});
    return {add(g, "GridSample", {h, g.find_value("grid")},
                {attr_int("align_corners", 1), attr_string("mode", "linear")})};
  };
  check_gradient(gc);
}

}  // namespace onyx::test
