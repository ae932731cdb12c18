// CPU data-movement kernels (shape_ops, tensor_ops, gather_scatter) against hand-computed
// values, plus the bad-input errors they raise.
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::attr_string;
using onyx::test::ModelBuilder;

namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

/// Runs one `op` node: `feeds` become graph inputs, `consts` initializers; outputs y0..y{n-1}.
NamedTensors run_op(const std::string& op, const Named& feeds, const Named& consts,
                    std::vector<Attribute> attrs = {}, int outputs = 1, int64_t opset = 21) {
  ModelBuilder b(opset);
  std::vector<std::string> ins, outs;
  NamedTensors feed_map;
  for (const auto& [name, t] : feeds) {
    b.input(name, t.dtype(), t.shape());
    feed_map[name] = t;
  }
  for (const auto& [name, t] : consts) b.initializer(name, t);
  // Inputs in the order given: feeds first unless names say otherwise ("in0", "in1", ...).
  std::vector<std::pair<std::string, Tensor>> all = feeds;
  all.insert(all.end(), consts.begin(), consts.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, t] : all) ins.push_back(name);
  for (int i = 0; i < outputs; ++i) outs.push_back("y" + std::to_string(i));
  onyx::test::set_attrs(b.node(op, ins, outs), std::move(attrs));
  for (const auto& o : outs) b.output(o);
  return b.session().run(feed_map);
}

Tensor iota_f(const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.f);
  return Tensor::from_vector<float>(shape, v);
}

Tensor i64(const Shape& shape, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(shape, v);
}

std::vector<double> vals(const Tensor& t) { return t.to_double_vector(); }

using onyx::test::expect_error;

}  // namespace

TEST(ShapeOps, ReshapeCopiesZeroAndInfersMinusOne) {
  auto out = run_op("Reshape", {{"in0", iota_f({2, 3, 4})}}, {{"in1", i64({3}, {0, -1, 2})}});
  EXPECT_EQ(out.at("y0").shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(vals(out.at("y0"))[23], 23.0);
  expect_error(
      [] {
        run_op("Reshape", {{"in0", iota_f({2, 3})}}, {{"in1", i64({1}, {5})}});
      },
      "cannot reshape");
}

// Found by tests/fuzz/fuzz_model.cpp: a run-time target shape whose element count overflows
// int64 (here 2^62 * 4) was multiplied out without a check (undefined behaviour).
TEST(ShapeOps, ReshapeToAnOverflowingShapeIsAnError) {
  expect_error(
      [] {
        run_op("Reshape", {{"in0", iota_f({2, 2})}, {"in1", i64({2}, {int64_t{1} << 62, 4})}}, {});
      },
      "more elements than int64 holds");
  expect_error(
      [] {
        run_op("Reshape", {{"in0", iota_f({2, 2})}, {"in1", i64({3}, {int64_t{1} << 62, 4, -1})}}, {});
      },
      "more elements than int64 holds");
}

// Found by tests/fuzz/fuzz_model.cpp: Tile multiplied each dim by its repeat count unchecked.
TEST(ShapeOps, TileToAnOverflowingShapeIsAnError) {
  expect_error(
      [] {
        run_op("Tile", {{"in0", iota_f({2, 2})}, {"in1", i64({2}, {int64_t{1} << 62, 1})}}, {});
      },
      "overflows int64");
}

TEST(ShapeOps, ShapeStartEndAndSqueezeUnsqueeze) {
  auto s = run_op("Shape", {{"in0", iota_f({2, 3, 4, 5})}}, {},
                  {attr_int("start", 1), attr_int("end", -1)});
  EXPECT_EQ(vals(s.at("y0")), (std::vector<double>{3, 4}));
  auto u = run_op("Unsqueeze", {{"in0", iota_f({2, 3})}}, {{"in1", i64({2}, {-1, 0})}});
  EXPECT_EQ(u.at("y0").shape(), (Shape{1, 2, 3, 1}));
  auto q = run_op("Squeeze", {{"in0", iota_f({1, 2, 1, 3})}}, {});
  EXPECT_EQ(q.at("y0").shape(), (Shape{2, 3}));
  expect_error(
      [] {
        run_op("Squeeze", {{"in0", iota_f({2, 3})}}, {{"in1", i64({1}, {0})}});
      },
      "cannot squeeze axis 0");
}

TEST(ShapeOps, TransposeMatchesNaiveForTiledAndGenericPaths) {
  // 2-D (tiled), NCHW->NHWC (batched 2-D) and a permutation needing the generic path.
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  for (const Case& c : {Case{{67, 45}, {1, 0}}, Case{{2, 5, 7, 9}, {0, 2, 3, 1}},
                        Case{{3, 4, 5, 6}, {2, 0, 3, 1}}, Case{{2, 3, 4}, {1, 0, 2}}}) {
    Tensor x = iota_f(c.shape);
    auto y = run_op("Transpose", {{"in0", x}}, {}, {attr_ints("perm", c.perm)}).at("y0");
    Shape os;
    for (int64_t p : c.perm) os.push_back(c.shape[static_cast<size_t>(p)]);
    ASSERT_EQ(y.shape(), os);
    std::vector<int64_t> xs(c.shape.size(), 1), idx(c.shape.size(), 0);
    for (size_t i = c.shape.size() - 1; i-- > 0;) xs[i] = xs[i + 1] * c.shape[i + 1];
    const float* got = y.data<float>();
    for (int64_t o = 0; o < y.numel(); ++o) {
      int64_t rem = o, src = 0;
      for (size_t d = os.size(); d-- > 0;) {
        src += (rem % os[d]) * xs[static_cast<size_t>(c.perm[d])];
        rem /= os[d];
      }
      ASSERT_EQ(got[o], static_cast<float>(src)) << "output element " << o;
    }
  }
}

TEST(ShapeOps, SliceNegativeStepsAndClamping) {
  // x = [[0..4], [5..9]]; rows all, columns from 10 (clamped to 4) down to 0 exclusive by -2.
  auto y = run_op("Slice", {{"in0", iota_f({2, 5})}},
                  {{"in1", i64({1}, {10})},
                   {"in2", i64({1}, {0})},
                   {"in3", i64({1}, {1})},
                   {"in4", i64({1}, {-2})}})
               .at("y0");
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(vals(y), (std::vector<double>{4, 2, 9, 7}));
  // Huge steps take one element without overflowing the stride or the count (model fuzz
  // target: a step of 1.08e18 times a row stride of 16).
  for (int64_t step : {int64_t{1080863910568919039}, std::numeric_limits<int64_t>::max(),
                       -int64_t{1080863910568919039}, std::numeric_limits<int64_t>::min()}) {
    SCOPED_TRACE(step);
    auto z = run_op("Slice", {{"in0", iota_f({5, 16})}},
                    {{"in1", i64({1}, {step > 0 ? 1 : 3})},
                     {"in2", i64({1}, {step > 0 ? 5 : -6})},
                     {"in3", i64({1}, {0})},
                     {"in4", i64({1}, {step})}})
                 .at("y0");
    EXPECT_EQ(z.shape(), (Shape{1, 16}));
    EXPECT_EQ(vals(z)[0], step > 0 ? 16 : 48);
  }
}

TEST(ShapeOps, PadModes) {
  Tensor x = iota_f({1, 3});  // [0, 1, 2]
  auto pads = i64({4}, {0, 2, 0, 2});
  auto run = [&](const std::string& mode) {
    return vals(run_op("Pad", {{"in0", x}}, {{"in1", pads}}, {attr_string("mode", mode)}).at("y0"));
  };
  EXPECT_EQ(run("constant"), (std::vector<double>{0, 0, 0, 1, 2, 0, 0}));
  EXPECT_EQ(run("reflect"), (std::vector<double>{2, 1, 0, 1, 2, 1, 0}));
  EXPECT_EQ(run("edge"), (std::vector<double>{0, 0, 0, 1, 2, 2, 2}));
  EXPECT_EQ(run("wrap"), (std::vector<double>{1, 2, 0, 1, 2, 0, 1}));
  // Negative pads crop; constant_value fills.
  auto y = run_op("Pad", {{"in0", x}},
                  {{"in1", i64({4}, {0, -1, 0, 1})}, {"in2", Tensor::scalar<float>(7)}})
               .at("y0");
  EXPECT_EQ(vals(y), (std::vector<double>{1, 2, 7}));
  // Pads are data: past 2^62 or summing past int64 is an error; a huge pad on an axis of an
  // empty output builds no index map (it took memory before the output's size was checked).
  for (int64_t big : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    expect_error([&] { run_op("Pad", {{"in0", x}}, {{"in1", i64({4}, {0, big, 0, 0})}}); },
                 "should lie in [-2^62, 2^62]");
  }
  expect_error(
      [&] { run_op("Pad", {{"in0", x}}, {{"in1", i64({4}, {0, int64_t{1} << 62, 0, int64_t{1} << 62})}}); },
      "larger than int64");
  auto empty = run_op("Pad", {{"in0", iota_f({0, 3})}}, {{"in1", i64({4}, {0, int64_t{1} << 40, 0, 0})}});
  EXPECT_EQ(empty.at("y0").shape(), (Shape{0, (int64_t{1} << 40) + 3}));
}

TEST(ShapeOps, ConcatSplitExpandTile) {
  auto c = run_op("Concat", {{"in0", iota_f({2, 1})}, {"in1", iota_f({2, 2})}}, {},
                  {attr_int("axis", 1)});
  EXPECT_EQ(vals(c.at("y0")), (std::vector<double>{0, 0, 1, 1, 2, 3}));
  expect_error(
      [] {
        run_op("Concat", {{"in0", iota_f({2, 1})}, {"in1", iota_f({3, 1})}}, {},
               {attr_int("axis", 1)});
      },
      "only axis 1 may differ");
  auto s = run_op("Split", {{"in0", iota_f({7})}}, {}, {attr_int("num_outputs", 3)}, 3, 18);
  EXPECT_EQ(vals(s.at("y0")), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(vals(s.at("y2")), (std::vector<double>{6}));
  // Split sizes whose sum overflows int64 are an error, not undefined arithmetic (fuzzing).
  expect_error(
      [] {
        run_op("Split", {{"in0", iota_f({7})}, {"in1", i64({2}, {int64_t{1} << 62, int64_t{1} << 62})}},
               {}, {}, 2, 18);
      },
      "should have 2 non-negative values summing to 7");
  auto e = run_op("Expand", {{"in0", iota_f({3, 1})}}, {{"in1", i64({3}, {2, 1, 2})}});
  EXPECT_EQ(e.at("y0").shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(vals(e.at("y0")), (std::vector<double>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
  auto t = run_op("Tile", {{"in0", iota_f({1, 2})}}, {{"in1", i64({2}, {2, 2})}});
  EXPECT_EQ(vals(t.at("y0")), (std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1}));
}

// Tile writes x once and then copies whole blocks (found by the model fuzz target: the
// element-wise walk took 20 s on a [4, 1, 19, 1] bool tiled [5, 65282, 3, 4]); every shape
// must still give numpy.tile's result.
TEST(ShapeOps, TileMatchesNaiveForManyShapes) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{}, {}},           {{3}, {1}},          {{3}, {4}},             {{1}, {5}},
      {{2, 3}, {1, 1}},   {{2, 3}, {3, 1}},    {{2, 3}, {1, 3}},       {{2, 1}, {2, 5}},
      {{1, 1, 1}, {2, 3, 4}}, {{4, 1, 3, 1}, {5, 7, 3, 4}}, {{2, 0, 3}, {2, 2, 2}},
      {{2, 3}, {0, 2}},   {{3, 2, 2}, {2, 1, 3}}};
  for (const auto& [shape, reps] : cases) {
    SCOPED_TRACE(shape_str(shape) + " x " + shape_str(reps));
    Tensor x = iota_f(shape);
    auto y = run_op("Tile", {{"in0", x}}, {{"in1", i64({static_cast<int64_t>(reps.size())}, reps)}})
                 .at("y0");
    Shape out;
    for (size_t i = 0; i < shape.size(); ++i) out.push_back(shape[i] * reps[i]);
    ASSERT_EQ(y.shape(), out);
    // y[i] = x[i mod shape], index by index.
    const std::vector<double> xv = vals(x), yv = vals(y);
    for (int64_t k = 0; k < shape_numel(out); ++k) {
      int64_t rest = k, xi = 0, xstride = 1;
      for (size_t d = out.size(); d-- > 0;) {
        xi += (rest % out[d]) % shape[d] * xstride;
        rest /= out[d];
        xstride *= shape[d];
      }
      ASSERT_EQ(yv[k], xv[xi]) << "element " << k;
    }
  }
  // Strings and bools take the same path.
  Tensor s = Tensor::from_vector<std::string>({2}, {"a", "bb"});
  auto ts = run_op("Tile", {{"in0", s}}, {{"in1", i64({1}, {3})}}).at("y0");
  ASSERT_EQ(ts.numel(), 6);
  EXPECT_EQ(ts.data<std::string>()[5], "bb");
  EXPECT_EQ(ts.data<std::string>()[2], "a");
}

TEST(ShapeOps, StringsMoveLikeAnyOtherDtype) {
  Tensor s = Tensor::from_vector<std::string>({3}, {"a", "bb", "ccc"});
  auto g = run_op("Gather", {{"in0", s}}, {{"in1", i64({2}, {2, -3})}}).at("y0");
  EXPECT_EQ(g.data<std::string>()[0], "ccc");
  EXPECT_EQ(g.data<std::string>()[1], "a");
}

TEST(GatherScatter, GatherAndErrors) {
  auto y = run_op("Gather", {{"in0", iota_f({3, 2})}}, {{"in1", i64({2}, {2, 0})}}).at("y0");
  EXPECT_EQ(vals(y), (std::vector<double>{4, 5, 0, 1}));
  expect_error(
      [] {
        run_op("Gather", {{"in0", iota_f({3, 2})}}, {{"in1", i64({1}, {3})}});
      },
      "indices value 3 is out of range");
}

TEST(GatherScatter, ElementsAndNDWithReductions) {
  auto ge = run_op("GatherElements", {{"in0", iota_f({2, 2})}},
                   {{"in1", i64({2, 2}, {0, 0, 1, 0})}}, {attr_int("axis", 1)});
  EXPECT_EQ(vals(ge.at("y0")), (std::vector<double>{0, 0, 3, 2}));
  auto se =
      run_op("ScatterElements", {{"in0", iota_f({1, 3})}},
             {{"in1", i64({1, 2}, {1, 1})}, {"in2", Tensor::from_vector<float>({1, 2}, {10, 20})}},
             {attr_int("axis", 1), attr_string("reduction", "add")});
  EXPECT_EQ(vals(se.at("y0")), (std::vector<double>{0, 31, 2}));
  auto gn = run_op("GatherND", {{"in0", iota_f({2, 2, 2})}}, {{"in1", i64({2, 1}, {1, 0})}},
                   {attr_int("batch_dims", 1)});
  EXPECT_EQ(vals(gn.at("y0")), (std::vector<double>{2, 3, 4, 5}));
  auto sn = run_op("ScatterND", {{"in0", iota_f({4})}},
                   {{"in1", i64({2, 1}, {3, 1})}, {"in2", Tensor::from_vector<float>({2}, {9, 8})}},
                   {attr_string("reduction", "max")});
  EXPECT_EQ(vals(sn.at("y0")), (std::vector<double>{0, 8, 2, 9}));
}

TEST(GatherScatter, OneHotNonZeroCompressUnique) {
  auto oh = run_op(
      "OneHot", {{"in0", i64({3}, {0, -1, 5})}},
      {{"in1", Tensor::scalar<int64_t>(3)}, {"in2", Tensor::from_vector<float>({2}, {0, 1})}});
  EXPECT_EQ(vals(oh.at("y0")), (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0}));
  // Float depth and indices: NaN, infinities and values past int64 are checked, not cast
  // (undefined behaviour before); an index out of range or NaN leaves its row off.
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  auto ohf = run_op("OneHot", {{"in0", Tensor::from_vector<float>({4}, {1.5f, nan, -1e30f, 1e30f})}},
                    {{"in1", Tensor::scalar<float>(2)}, {"in2", Tensor::from_vector<float>({2}, {0, 1})}});
  EXPECT_EQ(vals(ohf.at("y0")), (std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0}));
  for (float depth : {nan, inf, 1e30f, 0.5f}) {
    expect_error(
        [&] {
          run_op("OneHot", {{"in0", i64({1}, {0})}},
                 {{"in1", Tensor::scalar<float>(depth)}, {"in2", Tensor::from_vector<float>({2}, {0, 1})}});
        },
        "should be in [1, 2^62]");
  }
  auto nz = run_op("NonZero", {{"in0", Tensor::from_vector<float>({2, 2}, {1, 0, 0, 3})}}, {});
  EXPECT_EQ(nz.at("y0").shape(), (Shape{2, 2}));
  EXPECT_EQ(vals(nz.at("y0")), (std::vector<double>{0, 1, 0, 1}));
  auto cp =
      run_op("Compress", {{"in0", iota_f({3, 2})}},
             {{"in1", Tensor::from_vector<bool>({3}, {false, true, true})}}, {attr_int("axis", 0)});
  EXPECT_EQ(vals(cp.at("y0")), (std::vector<double>{2, 3, 4, 5}));
  auto un = run_op("Unique", {{"in0", Tensor::from_vector<float>({5}, {3, 1, 3, 2, 1})}}, {},
                   {attr_int("sorted", 0)}, 4);
  EXPECT_EQ(vals(un.at("y0")), (std::vector<double>{3, 1, 2}));
  EXPECT_EQ(vals(un.at("y1")), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ(vals(un.at("y2")), (std::vector<double>{0, 1, 0, 2, 1}));
  EXPECT_EQ(vals(un.at("y3")), (std::vector<double>{2, 2, 1}));
}

TEST(TensorOps, TriluDepthToSpaceReverseSequence) {
  auto tr = run_op("Trilu", {{"in0", iota_f({3, 3})}}, {{"in1", Tensor::scalar<int64_t>(1)}});
  EXPECT_EQ(vals(tr.at("y0")), (std::vector<double>{0, 1, 2, 0, 0, 5, 0, 0, 0}));
  // k far past the matrix (i + k + 1 overflowed for INT64_MAX): all kept or all zeroed.
  for (int64_t k : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    for (int64_t upper : {0, 1}) {
      auto t = run_op("Trilu", {{"in0", iota_f({2, 2})}}, {{"in1", Tensor::scalar<int64_t>(k)}},
                      {attr_int("upper", upper)});
      const bool keep = (upper == 1) == (k < 0);
      EXPECT_EQ(vals(t.at("y0")), keep ? (std::vector<double>{0, 1, 2, 3}) : (std::vector<double>{0, 0, 0, 0}))
          << k << " upper " << upper;
    }
  }
  // DCR: channel c*4 + ... : x[0, :, 0, 0] = [0, 1, 2, 3] becomes a 2x2 block.
  auto d2s =
      run_op("DepthToSpace", {{"in0", iota_f({1, 4, 1, 1})}}, {}, {attr_int("blocksize", 2)});
  EXPECT_EQ(d2s.at("y0").shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(vals(d2s.at("y0")), (std::vector<double>{0, 1, 2, 3}));
  auto s2d = run_op("SpaceToDepth", {{"in0", d2s.at("y0")}}, {}, {attr_int("blocksize", 2)});
  EXPECT_EQ(vals(s2d.at("y0")), (std::vector<double>{0, 1, 2, 3}));
  // blocksize^2 wrapped to 0 and C % 0 died of SIGFPE before.
  EXPECT_THROW(run_op("DepthToSpace", {{"in0", iota_f({1, 4, 1, 1})}}, {},
                      {attr_int("blocksize", int64_t{1} << 40)}),
               Error);
  auto rs = run_op("ReverseSequence", {{"in0", iota_f({3, 2})}}, {{"in1", i64({2}, {3, 1})}});
  EXPECT_EQ(vals(rs.at("y0")), (std::vector<double>{4, 1, 2, 3, 0, 5}));
}

TEST(ShapeOps, ConstantsRangeEyeLikeDropout) {
  auto r = run_op("Range", {{"in0", Tensor::scalar<int32_t>(10)}},
                  {{"in1", Tensor::scalar<int32_t>(4)}, {"in2", Tensor::scalar<int32_t>(-3)}});
  EXPECT_EQ(vals(r.at("y0")), (std::vector<double>{10, 7}));
  // A count beyond int64 (or infinite) is an error naming the inputs, not an undefined cast
  // (found by fuzzing); a NaN limit gives no elements.
  for (float limit : {1e35f, std::numeric_limits<float>::infinity()}) {
    expect_error(
        [&] {
          run_op("Range", {{"in0", Tensor::scalar<float>(0)}, {"in1", Tensor::scalar<float>(limit)}},
                 {{"in2", Tensor::scalar<float>(1)}});
        },
        "elements; at most 2^62");
  }
  // Elements fit the type but i * delta alone may not (undefined before): int32 and int64.
  auto r32 = run_op("Range", {{"in0", Tensor::scalar<int32_t>(-(1 << 30))}},
                    {{"in1", Tensor::scalar<int32_t>(INT32_MAX)}, {"in2", Tensor::scalar<int32_t>(1 << 30)}});
  EXPECT_EQ(vals(r32.at("y0")), (std::vector<double>{-(1 << 30), 0, 1 << 30}));
  const int64_t q = int64_t{1} << 62;
  auto r64 = run_op("Range", {{"in0", Tensor::scalar<int64_t>(-q)}},
                    {{"in1", Tensor::scalar<int64_t>(q + q / 2)}, {"in2", Tensor::scalar<int64_t>(q)}});
  EXPECT_EQ(r64.at("y0").to_int64_vector(), (std::vector<int64_t>{-q, 0, q}));
  auto nan = run_op("Range", {{"in0", Tensor::scalar<float>(0)}, {"in1", Tensor::scalar<float>(std::nanf(""))}},
                    {{"in2", Tensor::scalar<float>(1)}});
  EXPECT_EQ(nan.at("y0").numel(), 0);
  auto ey =
      run_op("EyeLike", {{"in0", Tensor::zeros(DataType::Int32, {2, 3})}}, {}, {attr_int("k", 1)});
  EXPECT_EQ(vals(ey.at("y0")), (std::vector<double>{0, 1, 0, 0, 0, 1}));
  // k past every dimension (INT64_MIN negated overflowed before) puts no 1 anywhere.
  for (int64_t k : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), int64_t{-2}}) {
    auto far = run_op("EyeLike", {{"in0", Tensor::zeros(DataType::Int32, {2, 3})}}, {}, {attr_int("k", k)});
    EXPECT_EQ(vals(far.at("y0")), (std::vector<double>{0, 0, 0, 0, 0, 0})) << k;
  }
  Tensor value = Tensor::scalar<int32_t>(5).reshape({1});
  Attribute v;
  v.name = "value";
  v.type = Attribute::Type::Tensor;
  v.t = value;
  auto cs = run_op("ConstantOfShape", {{"in0", i64({2}, {2, 1})}}, {}, {v});
  EXPECT_EQ(cs.at("y0").dtype(), DataType::Int32);
  EXPECT_EQ(vals(cs.at("y0")), (std::vector<double>{5, 5}));
  auto dr = run_op("Dropout", {{"in0", iota_f({3})}}, {}, {}, 2);
  EXPECT_EQ(vals(dr.at("y0")), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(vals(dr.at("y1")), (std::vector<double>{1, 1, 1}));
}
