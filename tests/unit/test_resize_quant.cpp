// Resize / GridSample / AffineGrid, the quantization ops and the image/detection ops
// (CenterCropPad, Col2Im, MaxUnpool, RoiAlign, NonMaxSuppression, BitCast) against
// hand-computed values, plus the bad-input errors they raise.
#include <array>
#include <cmath>
#include <limits>

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

// A sub-byte tensor (stored one value per byte).
Tensor sub_byte(DataType dt, const Shape& shape, const std::vector<int>& v) {
  Tensor t = Tensor::empty(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int8_t>()[i] = int8_t(v[i]);
  return t;
}

using onyx::test::expect_error;

const Tensor kNone;

TEST(ResizeQuant, ResizeNearestUpsamplesByRepeating) {
  auto y = run_op(
      "Resize",
      {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})}, {"roi", kNone}, {"scales", T_({4}, {1, 1, 2, 2})}},
      {attr_string("mode", "nearest")}, 1, 19);
  EXPECT_EQ(y.at("y0").shape(), Shape({1, 1, 4, 4}));
  expect_near(y.at("y0"), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST(ResizeQuant, ResizeLinearHalfPixelAndAlignCorners) {
  auto y =
      run_op("Resize",
             {{"x", T_({1, 1, 1, 2}, {0, 10})}, {"roi", kNone}, {"scales", T_({4}, {1, 1, 1, 2})}},
             {attr_string("mode", "linear")}, 1, 19);
  expect_near(y.at("y0"), {0, 2.5, 7.5, 10});
  y = run_op("Resize",
             {{"x", T_({1, 1, 1, 2}, {0, 10})},
              {"roi", kNone},
              {"scales", kNone},
              {"sizes", T_<int64_t>({4}, {1, 1, 1, 4})}},
             {attr_string("mode", "linear"),
              attr_string("coordinate_transformation_mode", "align_corners")},
             1, 19);
  expect_near(y.at("y0"), {0, 10.0 / 3, 20.0 / 3, 10});
}

TEST(ResizeQuant, ResizeUint8RoundsAndUpsampleRepeats) {
  auto y = run_op("Resize",
                  {{"x", T_<uint8_t>({1, 2}, {0, 5})}, {"roi", kNone}, {"scales", T_({2}, {1, 2})}},
                  {attr_string("mode", "linear")}, 1, 19);
  EXPECT_EQ(y.at("y0").dtype(), DataType::UInt8);
  expect_near(y.at("y0"), {0, 1, 4, 5});  // 1.25 -> 1, 3.75 -> 4
  y = run_op("Upsample", {{"x", T_({2, 1}, {7, 8})}, {"s", T_({2}, {1, 3})}},
             {attr_string("mode", "nearest")}, 1, 9);
  expect_near(y.at("y0"), {7, 7, 7, 8, 8, 8});
}

// Found by the model fuzz target: nearest mode converted an extrapolation_value of 1e28 to
// uint16 (undefined); it clamps to the type's range, as the linear modes already did.
TEST(ResizeQuant, ExtrapolationValuePastTheTypeClamps) {
  for (double value : {1e28, -1e28}) {
    auto y = run_op("Resize",
                    {{"x", T_<uint16_t>({1, 1, 2, 2}, {1, 2, 3, 4})},
                     {"roi", T_({8}, {0, 0, -1, -1, 1, 1, 2, 2})},
                     {"scales", kNone},
                     {"sizes", T_<int64_t>({4}, {1, 1, 2, 2})}},
                    {attr_string("mode", "nearest"),
                     attr_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                     attr_float("extrapolation_value", value)},
                    1, 19);
    expect_near(y.at("y0"), std::vector<double>(4, value > 0 ? 65535 : 0));
  }
}

// A roi is data: NaN or huge corners made source coordinates that were cast to int64
// (undefined); such a coordinate is now extrapolated, or for NaN clamped to the edge.
TEST(ResizeQuant, NonFiniteOrHugeRoiExtrapolates) {
  const double nan = std::nan("");
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    SCOPED_TRACE(mode);
    auto y = run_op("Resize",
                    {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})},
                     {"roi", T_({8}, {0, 0, nan, -1e30, 1, 1, 1e30, nan})},
                     {"scales", kNone},
                     {"sizes", T_<int64_t>({4}, {1, 1, 2, 2})}},
                    {attr_string("mode", mode),
                     attr_string("coordinate_transformation_mode", "tf_crop_and_resize"),
                     attr_float("extrapolation_value", 7)},
                    1, 19);
    ASSERT_EQ(y.at("y0").shape(), Shape({1, 1, 2, 2}));
  }
}

TEST(ResizeQuant, ResizeRejectsBadScales) {
  expect_error(
      [] {
        run_op("Resize",
               {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})}, {"roi", kNone}, {"scales", T_({2}, {2, 2})}},
               {}, 1, 19);
      },
      "scales should have 4 values");
  // Found by tests/fuzz/fuzz_model.cpp: a huge (or infinite) scale made an output size past
  // int64 (undefined conversion), and a roi shorter than 2 * rank was read past its end outside
  // tf_crop_and_resize, where the spec ignores it.
  for (double big : {1e30, std::numeric_limits<double>::infinity()}) {
    expect_error(
        [&] {
          run_op("Resize",
                 {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})}, {"roi", kNone}, {"scales", T_({4}, {1, 1, big, 1})}},
                 {}, 1, 19);
        },
        "too large");
  }
  auto y = run_op(
      "Resize",
      {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})}, {"roi", T_({1}, {0.5})}, {"scales", T_({4}, {1, 1, 2, 2})}},
      {attr_string("mode", "nearest")}, 1, 19);
  expect_near(y.at("y0"), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST(ResizeQuant, GridSampleLinearAndAffineGrid) {
  const Tensor x = T_({1, 1, 2, 2}, {1, 2, 3, 4});
  auto y = run_op("GridSample", {{"x", x}, {"g", T_({1, 1, 2, 2}, {0, 0, -1, -1})}}, {}, 1, 20);
  expect_near(y.at("y0"), {2.5, 0.25});  // centre; corner mixes with three zero pixels
  y = run_op("GridSample", {{"x", x}, {"g", T_({1, 1, 1, 2}, {-1, -1})}},
             {attr_int("align_corners", 1)}, 1, 20);
  expect_near(y.at("y0"), {1});
  y = run_op("AffineGrid",
             {{"t", T_({1, 2, 3}, {1, 0, 0, 0, 1, 0})}, {"s", T_<int64_t>({4}, {1, 1, 2, 2})}},
             {attr_int("align_corners", 1)}, 1, 20);
  EXPECT_EQ(y.at("y0").shape(), Shape({1, 2, 2, 2}));
  expect_near(y.at("y0"), {-1, -1, 1, -1, -1, 1, 1, 1});
}

// Grid coordinates are data: NaN, infinities and values past int64 sample padding in every
// mode and padding instead of being cast to int64 (undefined behaviour before); a far but
// finite coordinate reflects into the image.
TEST(ResizeQuant, GridSampleWithNonFiniteOrHugeCoordinates) {
  const Tensor x = T_({1, 1, 2, 2}, {1, 2, 3, 4});
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  const Tensor g = T_({1, 1, 4, 2}, {nan, 0, inf, -inf, 1e30f, -1e30f, 3e19f, 0});
  for (const char* mode : {"linear", "nearest", "cubic"}) {
    for (const char* padding : {"zeros", "border", "reflection"}) {
      SCOPED_TRACE(std::string(mode) + " " + padding);
      auto y = run_op("GridSample", {{"x", x}, {"g", g}},
                      {attr_string("mode", mode), attr_string("padding_mode", padding)}, 1, 20);
      ASSERT_EQ(y.at("y0").shape(), Shape({1, 1, 1, 4}));
      if (std::string(padding) == "reflection") {
        const float far = y.at("y0").data<float>()[3];  // x = 3e19 reflects to some pixel mix
        EXPECT_TRUE(std::isfinite(far)) << far;
      }
    }
  }
}

TEST(ResizeQuant, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  auto y = run_op("QuantizeLinear", {{"x", T_({6}, {0, 1, 3, 5, -300, 1000})},
                                     {"s", T_({}, {2})},
                                     {"z", T_<uint8_t>({}, {128})}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::UInt8);
  expect_near(y.at("y0"), {128, 128, 130, 130, 0, 255});
  y = run_op(
      "QuantizeLinear",
      {{"x", T_({2, 2}, {1, 2, 3, 4})}, {"s", T_({2}, {1, 2})}, {"z", T_<int8_t>({2}, {0, 1})}},
      {attr_int("axis", 1)});
  expect_near(y.at("y0"), {1, 2, 3, 3});
  y = run_op("QuantizeLinear", {{"x", T_({3}, {-10, 3.4, 9})},
                                {"s", T_({}, {1})},
                                {"z", sub_byte(DataType::Int4, {}, {0})}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Int4);
  expect_near(y.at("y0"), {-8, 3, 7});
}

TEST(ResizeQuant, EightBitPerTensorPathsMatchTheFormula) {
  // The vectorised per-tensor paths QDQ models run (float x, float scale, 8-bit y) against
  // the definition in double: halves to even, saturation, NaN -> the low end, infinities.
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t n = 100003;  // several threads' chunks and a tail
  std::vector<double> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = (double(i % 2001) - 1000.0) * 0.25 + (i % 7 == 0 ? 0.125 : 0.0);
  xs[1] = std::nan(""), xs[2] = inf, xs[3] = -inf, xs[4] = 1e30, xs[5] = 0.375, xs[6] = -0.375;
  const double scale = 0.25;
  for (bool is_signed : {false, true}) {
    const double zp = is_signed ? -3 : 131, lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    Tensor z = is_signed ? T_<int8_t>({}, {zp}) : T_<uint8_t>({}, {zp});
    auto y = run_op("QuantizeLinear", {{"x", T_({n}, xs)}, {"s", T_({}, {scale})}, {"z", z}});
    const std::vector<int64_t> q = y.at("y0").to_int64_vector();
    for (int64_t i = 0; i < n; ++i) {
      const double v = double(float(xs[i]) / float(scale));
      const double want = std::isnan(v) ? lo : std::clamp(std::nearbyint(v) + zp, lo, hi);
      ASSERT_EQ(q[i], int64_t(want)) << "x " << xs[i] << (is_signed ? " int8" : " uint8");
    }
    auto d = run_op("DequantizeLinear", {{"x", y.at("y0")}, {"s", T_({}, {scale})}, {"z", z}});
    const std::vector<double> back = d.at("y0").to_double_vector();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(back[i], double(float((double(q[i]) - zp) * scale))) << i;
  }
}

TEST(ResizeQuant, DequantizeLinearBlockedAndDynamicQuantize) {
  auto y = run_op("DequantizeLinear",
                  {{"x", T_<int8_t>({1, 4}, {2, 4, 6, 8})}, {"s", T_({1, 2}, {1, 0.5})}},
                  {attr_int("axis", 1), attr_int("block_size", 2)});
  expect_near(y.at("y0"), {2, 4, 3, 4});
  y = run_op("DynamicQuantizeLinear", {{"x", T_({3}, {-1, 0, 2})}}, {}, 3);
  expect_near(y.at("y0"), {0, 85, 255});
  expect_near(y.at("y1"), {3.0 / 255}, 1e-7);
  expect_near(y.at("y2"), {85});
  // An infinite input makes the scale infinite and the zero point NaN: both saturate (0) where
  // the uint8 casts were undefined.
  const float inf = std::numeric_limits<float>::infinity();
  y = run_op("DynamicQuantizeLinear", {{"x", T_({3}, {-inf, 0, 2})}}, {}, 3);
  expect_near(y.at("y0"), {0, 0, 0});
  expect_near(y.at("y2"), {0});
}

TEST(ResizeQuant, QuantizeRejectsWrongPerAxisScale) {
  expect_error(
      [] {
        run_op("QuantizeLinear", {{"x", T_({2, 3}, {1, 2, 3, 4, 5, 6})}, {"s", T_({2}, {1, 2})}},
               {attr_int("axis", 1)});
      },
      "per-axis scale should have shape [3]");
}

TEST(ResizeQuant, IntegerMatMulAndConv) {
  auto y = run_op("MatMulInteger", {{"a", T_<uint8_t>({2, 2}, {1, 2, 3, 4})},
                                    {"b", T_<uint8_t>({2, 2}, {1, 0, 0, 1})},
                                    {"az", T_<uint8_t>({}, {1})}});
  EXPECT_EQ(y.at("y0").dtype(), DataType::Int32);
  expect_near(y.at("y0"), {0, 1, 2, 3});
  // 1x1 kernel of weight 2 over a 2x2 image, x_zero_point 1.
  y = run_op("ConvInteger",
             {{"x", T_<uint8_t>({1, 1, 2, 2}, {1, 2, 3, 4})},
              {"w", T_<uint8_t>({1, 1, 1, 1}, {2})},
              {"xz", T_<uint8_t>({}, {1})}},
             {}, 1, 10);
  expect_near(y.at("y0"), {0, 2, 4, 6});
  // An int32 bias of INT32_MAX plus the products wraps around (the accumulator overflowed
  // before: undefined) and then saturates to uint8's 0, as a wrapped int32 accumulator does.
  y = run_op("QLinearConv",
             {{"x", T_<uint8_t>({1, 1, 1, 1}, {2})},
              {"xs", T_({}, {1})},
              {"xz", T_<uint8_t>({}, {0})},
              {"w", T_<uint8_t>({1, 1, 1, 1}, {3})},
              {"ws", T_({}, {1})},
              {"wz", T_<uint8_t>({}, {0})},
              {"ys", T_({}, {1})},
              {"yz", T_<uint8_t>({}, {0})},
              {"b", Tensor::from_vector<int32_t>({1}, {INT32_MAX})}},
             {}, 1, 10);
  expect_near(y.at("y0"), {0});
  // QLinearMatMul: (a @ b) * (0.5 * 1 / 1) + 10.
  y = run_op("QLinearMatMul", {{"a", T_<uint8_t>({1, 2}, {2, 4})},
                               {"as", T_({}, {0.5})},
                               {"az", T_<uint8_t>({}, {0})},
                               {"b", T_<uint8_t>({2, 1}, {1, 1})},
                               {"bs", T_({}, {1})},
                               {"bz", T_<uint8_t>({}, {0})},
                               {"ys", T_({}, {1})},
                               {"yz", T_<uint8_t>({}, {10})}});
  expect_near(y.at("y0"), {13});
}

TEST(ResizeQuant, IntegerConvBadWindowAttributesAreErrors) {
  // strides [0] divided by zero (SIGFPE) and a short list was read past its end before.
  const Named in = {{"x", T_<uint8_t>({1, 1, 2, 2}, {1, 2, 3, 4})},
                    {"w", T_<uint8_t>({1, 1, 1, 1}, {2})}};
  for (const Attribute& bad :
       {attr_ints("strides", {0, 1}), attr_ints("strides", {1}), attr_ints("strides", {int64_t{1} << 40, 1}),
        attr_ints("dilations", {1, -1}), attr_ints("pads", {-1, 0, 0, 0}),
        attr_ints("kernel_shape", {2, 2}), attr_int("group", 0)}) {
    try {
      run_op("ConvInteger", in, {bad}, 1, 10);
      ADD_FAILURE() << "no error for " << bad.name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.name), std::string::npos) << e.what();
    }
  }
}

TEST(ResizeQuant, CenterCropPadCol2ImMaxUnpool) {
  auto y = run_op("CenterCropPad", {{"x", T_({5}, {1, 2, 3, 4, 5})}, {"s", T_<int64_t>({1}, {3})}},
                  {}, 1, 18);
  expect_near(y.at("y0"), {2, 3, 4});
  y = run_op("CenterCropPad", {{"x", T_({5}, {1, 2, 3, 4, 5})}, {"s", T_<int64_t>({1}, {7})}}, {},
             1, 18);
  expect_near(y.at("y0"), {0, 1, 2, 3, 4, 5, 0});
  // Two overlapping 1x2 blocks over a 1x3 image: the middle pixel sums two taps.
  y = run_op("Col2Im",
             {{"x", T_({1, 2, 2}, {1, 2, 10, 20})},
              {"i", T_<int64_t>({2}, {1, 3})},
              {"b", T_<int64_t>({2}, {1, 2})}},
             {}, 1, 18);
  EXPECT_EQ(y.at("y0").shape(), Shape({1, 1, 1, 3}));
  expect_near(y.at("y0"), {1, 12, 20});
  y = run_op("MaxUnpool",
             {{"x", T_({1, 1, 1, 2}, {5, 7})}, {"i", T_<int64_t>({1, 1, 1, 2}, {1, 2})}},
             {attr_ints("kernel_shape", {1, 2}), attr_ints("strides", {1, 2})});
  expect_near(y.at("y0"), {0, 5, 7, 0});
}

// Found by tests/fuzz/fuzz_model.cpp: a ROI of 1e30 pixels asked for a sampling grid past
// any vector's size (std::length_error on an OpenMP worker: the process ended), a NaN ROI cast
// NaN to an integer. Both are onyx::Errors naming the ROI; bad attributes are refused when the
// session is built.
TEST(ResizeQuant, RoiAlignHugeOrNanRoisAreErrors) {
  for (double edge : {1e30, std::nan("")}) {
    SCOPED_TRACE(edge);
    expect_error(
        [&] {
          run_op("RoiAlign",
                 {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                  {"r", T_({2, 4}, {0, 0, 2, 2, 0, 0, edge, 2})},
                  {"b", T_<int64_t>({2}, {0, 0})}},
                 {attr_int("output_height", 2), attr_int("output_width", 2)}, 1, 16);
        },
        "ROI 1 of batch item 0");
  }
  expect_error(
      [] {
        run_op("RoiAlign",
               {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                {"r", T_({1, 4}, {0, 0, 2, 2})},
                {"b", T_<int64_t>({1}, {0})}},
               {attr_int("output_height", 0)}, 1, 16);
      },
      "output_height and output_width");
  // A NaN ROI with a fixed sampling grid, and a ROI of negative extent (x1 < x0, possible with
  // half_pixel), whose grid is negative: its bins sample nothing and are 0 (the grid's
  // product was positive and the kernel read samples it never computed).
  expect_error(
      [] {
        run_op("RoiAlign",
               {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                {"r", T_({1, 4}, {0, std::nan(""), 2, 2})},
                {"b", T_<int64_t>({1}, {0})}},
               {attr_int("sampling_ratio", 2)}, 1, 16);
      },
      "is not finite");
  auto y = run_op("RoiAlign",
                  {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                   {"r", T_({1, 4}, {3, 3, 0, 0})},
                   {"b", T_<int64_t>({1}, {0})}},
                  {attr_int("output_height", 2), attr_int("output_width", 2)}, 1, 16);
  expect_near(y.at("y0"), {0, 0, 0, 0});
  // A huge negative extent (found by fuzzing): its grid of -5e29 samples was cast to int64.
  auto far = run_op("RoiAlign",
                    {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                     {"r", T_({1, 4}, {1e30, 0, 0, 2})},
                     {"b", T_<int64_t>({1}, {0})}},
                    {attr_int("output_height", 2), attr_int("output_width", 2)}, 1, 16);
  expect_near(far.at("y0"), {0, 0, 0, 0});
  // An empty feature map (H or W 0, found by fuzzing: the sampling read the empty plane):
  // every bin is 0.
  for (const Shape& empty : {Shape{1, 2, 0, 4}, Shape{1, 2, 4, 0}}) {
    auto z = run_op("RoiAlign",
                    {{"x", T_(empty, {})}, {"r", T_({1, 4}, {0, 0, 2, 2})}, {"b", T_<int64_t>({1}, {0})}},
                    {attr_int("output_height", 1), attr_int("output_width", 2)}, 1, 16);
    EXPECT_EQ(z.at("y0").shape(), (Shape{1, 2, 1, 2}));
    expect_near(z.at("y0"), {0, 0, 0, 0});
  }
}

/// RoiAlign of one ROI over a float64 [1, C, H, W] map as the ONNX reference writes it
/// (half_pixel, one sample at a time, no table): the oracle for the kernel's tables below.
std::vector<double> roi_align_ref(const std::vector<double>& x, int64_t C, int64_t H, int64_t W,
                                  const std::array<double, 4>& box, int64_t oh, int64_t ow,
                                  int64_t ratio, bool max) {
  const double x0 = box[0] - 0.5, y0 = box[1] - 0.5, rw = box[2] - 0.5 - x0,
               rh = box[3] - 0.5 - y0, bh = rh / double(oh), bw = rw / double(ow);
  const int64_t gh = ratio > 0 ? ratio : int64_t(std::ceil(rh / double(oh))),
                gw = ratio > 0 ? ratio : int64_t(std::ceil(rw / double(ow)));
  std::vector<double> y;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw) {
        double v = 0;
        bool first = true;
        for (int64_t iy = 0; iy < gh; ++iy)
          for (int64_t ix = 0; ix < gw; ++ix) {
            double yy = y0 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
            double xx = x0 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw);
            double m = 0, sum = 0;
            if (!(yy < -1.0 || yy > double(H) || xx < -1.0 || xx > double(W))) {
              yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
              int64_t yl = int64_t(yy), xl = int64_t(xx), yh = yl + 1, xh = xl + 1;
              if (yl >= H - 1) yh = yl = H - 1, yy = double(yl);
              if (xl >= W - 1) xh = xl = W - 1, xx = double(xl);
              const double ly = yy - double(yl), lx = xx - double(xl);
              const double w[4] = {(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx};
              const double at[4] = {x[(c * H + yl) * W + xl], x[(c * H + yl) * W + xh],
                                    x[(c * H + yh) * W + xl], x[(c * H + yh) * W + xh]};
              m = w[0] * at[0];
              for (int j = 0; j < 4; ++j) sum += w[j] * at[j], m = std::max(m, w[j] * at[j]);
            }
            v = max ? (first ? m : std::max(v, m)) : v + sum;
            first = false;
          }
        y.push_back(max ? v : v / double(std::max<int64_t>(gh * gw, 1)));
      }
  return y;
}

// Found by tests/fuzz/fuzz_model.cpp (ASan out of memory): RoiAlign computed the samples of a
// whole ROI into one table, up to 2^26 samples (4 GiB) for an allowed grid. Tables now hold at
// most 2^16 samples: several bins per table (sampling_ratio 100: 10,000 samples a bin), or
// one bin in parts (sampling_ratio 300: 90,000). Results equal the one-sample-at-a-time oracle.
TEST(ResizeQuant, RoiAlignLargeSamplingGridsInBoundedTables) {
  const int64_t C = 2, H = 9, W = 11;
  std::vector<double> x;
  for (int64_t i = 0; i < C * H * W; ++i) x.push_back(std::sin(0.37 * double(i)) * 4.0 - 1.0);
  struct Case {
    int64_t oh, ow, ratio;
    std::array<double, 4> box;
  };
  for (const Case& c : {Case{7, 7, 100, {0.5, 1.0, 9.5, 7.5}}, Case{3, 2, 300, {-0.7, 0.2, 10.8, 8.9}},
                        Case{2, 3, 0, {1.0, 0.0, 10.0, 8.0}}}) {
    for (bool max : {false, true}) {
      SCOPED_TRACE(::testing::Message() << c.oh << "x" << c.ow << " ratio " << c.ratio
                                        << (max ? " max" : " avg"));
      auto y = run_op("RoiAlign",
                      {{"x", T_({1, C, H, W}, x)},
                       {"r", T_({1, 4}, {c.box[0], c.box[1], c.box[2], c.box[3]})},
                       {"b", T_<int64_t>({1}, {0})}},
                      {attr_int("output_height", c.oh), attr_int("output_width", c.ow),
                       attr_int("sampling_ratio", c.ratio),
                       attr_string("mode", max ? "max" : "avg")},
                      1, 16);
      expect_near(y.at("y0"), roi_align_ref(x, C, H, W, c.box, c.oh, c.ow, c.ratio, max), 1e-5);
    }
  }
}

// Found by tests/validation/bad_attributes.py under ASan: MaxUnpool read strides[1] and
// pads[2..3] whatever the lists' lengths (a stack-buffer-overflow the release build survived).
TEST(ResizeQuant, MaxUnpoolAttributeListsAreChecked) {
  for (const auto& attr : {attr_ints("strides", {2}), attr_ints("pads", {0}), attr_ints("strides", {0, 2}),
                           attr_ints("pads", {0, 0, -1, 0})}) {
    SCOPED_TRACE(attr.name);
    expect_error(
        [&] {
          run_op("MaxUnpool",
                 {{"x", T_({1, 1, 2, 2}, {1, 2, 3, 4})}, {"i", T_<int64_t>({1, 1, 2, 2}, {0, 3, 8, 15})}},
                 {attr_ints("kernel_shape", {2, 2}), attr}, 1, 11);
        },
        "'" + attr.name + "'");
  }
}

TEST(ResizeQuant, RoiAlignNmsBitCast) {
  auto y = run_op("RoiAlign",
                  {{"x", T_({1, 1, 4, 4}, std::vector<double>(16, 3.0))},
                   {"r", T_({1, 4}, {0, 0, 2, 2})},
                   {"b", T_<int64_t>({1}, {0})}},
                  {attr_int("output_height", 2), attr_int("output_width", 2)}, 1, 16);
  expect_near(y.at("y0"), {3, 3, 3, 3});
  // Boxes 0 and 1 overlap (IoU 0.81); box 2 is far away.
  y = run_op("NonMaxSuppression",
             {{"bx", T_({1, 3, 4}, {0, 0, 1, 1, 0, 0.1, 1, 1.1, 5, 5, 6, 6})},
              {"sc", T_({1, 1, 3}, {0.9, 0.8, 0.7})},
              {"m", T_<int64_t>({1}, {3})},
              {"iou", T_({1}, {0.5})}},
             {}, 1, 11);
  EXPECT_EQ(y.at("y0").shape(), Shape({2, 3}));
  expect_near(y.at("y0"), {0, 0, 0, 0, 0, 2});
  // INT64_MAX, the usual "no limit", went through a double (2^63) and an undefined cast.
  y = run_op("NonMaxSuppression",
             {{"bx", T_({1, 3, 4}, {0, 0, 1, 1, 0, 0.1, 1, 1.1, 5, 5, 6, 6})},
              {"sc", T_({1, 1, 3}, {0.9, 0.8, 0.7})},
              {"m", Tensor::from_vector<int64_t>({1}, {std::numeric_limits<int64_t>::max()})},
              {"iou", T_({1}, {0.5})}},
             {}, 1, 11);
  expect_near(y.at("y0"), {0, 0, 0, 0, 0, 2});
  y = run_op("BitCast", {{"x", T_({1}, {1.0})}}, {attr_int("to", int64_t(DataType::Int32))}, 1, 26);
  EXPECT_EQ(y.at("y0").dtype(), DataType::Int32);
  expect_near(y.at("y0"), {1065353216});
  expect_error(
      [] {
        run_op("BitCast", {{"x", T_({1}, {1.0})}}, {attr_int("to", int64_t(DataType::Int64))}, 1,
               26);
      },
      "bits");
}

}  // namespace
