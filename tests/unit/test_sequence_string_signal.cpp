// Sequence, optional, string, signal and ai.onnx.ml kernels against hand-computed values,
// plus the bad-input errors they raise.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;
using onyx::test::set_attrs;

namespace {

Tensor f32(const Shape& shape, std::vector<float> v) {
  return Tensor::from_vector<float>(shape, v);
}
Tensor i64(const Shape& shape, std::vector<int64_t> v) {
  return Tensor::from_vector<int64_t>(shape, v);
}
Tensor strs(const Shape& shape, std::vector<std::string> v) {
  return Tensor::from_vector<std::string>(shape, v);
}
std::vector<std::string> str_values(const Tensor& t) {
  const std::string* p = t.data<std::string>();
  return {p, p + t.numel()};
}

using onyx::test::expect_error;

TEST(Sequence, SplitEditConcat) {
  // x [2, 3] split on axis 1 into [1, 2] columns, second part erased, x's column 0 inserted
  // at the front, then concatenated back on axis 1.
  ModelBuilder b(18);
  b.input("x", DataType::Float, Shape{2, 3});
  b.initializer("split", i64({2}, {1, 2}));
  b.initializer("one", i64({}, {1}));
  b.initializer("zero", i64({}, {0}));
  set_attrs(b.node("SplitToSequence", {"x", "split"}, {"s"}), {attr_int("axis", 1)});
  b.node("SequenceErase", {"s", "one"}, {"s1"});
  b.node("SequenceAt", {"s", "zero"}, {"first"});
  b.node("SequenceInsert", {"s1", "first", "zero"}, {"s2"});
  b.node("SequenceLength", {"s2"}, {"n"});
  set_attrs(b.node("ConcatFromSequence", {"s2"}, {"y"}), {attr_int("axis", 1)});
  b.output("y").output("n");
  Session s = b.session();
  NamedTensors out = s.run({{"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}});
  EXPECT_EQ(out["y"].shape(), (Shape{2, 2}));
  expect_near(out["y"], {1, 1, 4, 4});
  EXPECT_EQ(out["n"].data<int64_t>()[0], 2);
}

// SplitToSequence's piece count and split lengths come from data: an empty input with a huge
// axis would make 2^40 sequence elements, and lengths of 2^62 + 2^62 overflowed their sum.
TEST(Sequence, SplitToSequenceBoundsPiecesAndLengths) {
  auto run = [](const Shape& shape, const Tensor& split) {
    ModelBuilder b(18);
    b.input("x", DataType::Float, shape);
    std::vector<std::string> ins{"x"};
    if (split.defined()) {
      b.initializer("split", split);
      ins.push_back("split");
    }
    set_attrs(b.node("SplitToSequence", ins, {"s"}), {attr_int("axis", 1)});
    b.node("SequenceLength", {"s"}, {"n"});
    b.output("n");
    return b.session().run({{"x", Tensor::zeros(DataType::Float, shape)}});
  };
  expect_error([&] { run({0, int64_t{1} << 40}, Tensor()); }, "at most 2^24 are supported");
  expect_error([&] { run({0, int64_t{1} << 40}, i64({}, {2})); }, "at most 2^24 are supported");
  expect_error([&] { run({1, 7}, i64({2}, {int64_t{1} << 62, int64_t{1} << 62})); }, "sum within int64");
  // A huge scalar length over a huge empty axis: two pieces, no overflowing position.
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(run({0, big}, i64({}, {(int64_t{1} << 62) + 1}))["n"].to_int64_vector(), (std::vector<int64_t>{2}));
  EXPECT_EQ(run({1, 7}, i64({}, {3}))["n"].to_int64_vector(), (std::vector<int64_t>{3}));
}

TEST(Sequence, NewAxisConcatAndBadPosition) {
  ModelBuilder b(18);
  b.input("a", DataType::Float, Shape{2});
  b.input("b", DataType::Float, Shape{2});
  b.input("pos", DataType::Int64, Shape{});
  b.node("SequenceConstruct", {"a", "b"}, {"s"});
  set_attrs(b.node("ConcatFromSequence", {"s"}, {"y"}),
            {attr_int("axis", -1), attr_int("new_axis", 1)});
  b.node("SequenceAt", {"s", "pos"}, {"z"});
  b.output("y").output("z");
  Session s = b.session();
  NamedTensors out =
      s.run({{"a", f32({2}, {1, 2})}, {"b", f32({2}, {3, 4})}, {"pos", i64({}, {-1})}});
  EXPECT_EQ(out["y"].shape(), (Shape{2, 2}));
  expect_near(out["y"], {1, 3, 2, 4});
  expect_near(out["z"], {3, 4});
  expect_error(
      [&] {
        s.run({{"a", f32({2}, {1, 2})}, {"b", f32({2}, {3, 4})}, {"pos", i64({}, {2})}});
      },
      "out of range");
}

// Elements of different ranks are an error naming the element, also with new_axis, where
// the 1 was once inserted at `axis` of an element too short to have it (found by fuzzing).
TEST(Sequence, ConcatOfElementsOfDifferentRanks) {
  for (int64_t new_axis : {0, 1}) {
    SCOPED_TRACE(new_axis);
    ModelBuilder b(18);
    b.input("a", DataType::Float, Shape{2, 2});
    b.input("b", DataType::Float, Shape{});
    b.node("SequenceConstruct", {"a", "b"}, {"s"});
    set_attrs(b.node("ConcatFromSequence", {"s"}, {"y"}),
              {attr_int("axis", 1 + new_axis), attr_int("new_axis", new_axis)});
    b.output("y");
    expect_error([&] { b.session().run({{"a", f32({2, 2}, {1, 2, 3, 4})}, {"b", f32({}, {5})}}); },
                 "element 1 is float []");
  }
}

TEST(Optional, EmptyAndFull) {
  ModelBuilder b(18);
  b.input("x", DataType::Float, Shape{1});
  b.node("Optional", {}, {"none"});
  b.node("OptionalHasElement", {"none"}, {"h0"});
  b.node("Optional", {"x"}, {"opt"});
  b.node("OptionalHasElement", {"opt"}, {"h1"});
  b.node("OptionalGetElement", {"opt"}, {"y"});
  b.output("h0").output("h1").output("y");
  NamedTensors out = b.session().run({{"x", f32({1}, {7})}});
  EXPECT_FALSE(out["h0"].data<bool>()[0]);
  EXPECT_TRUE(out["h1"].data<bool>()[0]);
  expect_near(out["y"], {7});

  ModelBuilder e(18);
  e.node("Optional", {}, {"none"});
  e.node("OptionalGetElement", {"none"}, {"y"});
  e.output("y");
  Session s = e.session();
  expect_error([&] { s.run({}); }, "optional input is empty");
}

TEST(String, SplitConcatMatchNormalize) {
  ModelBuilder b(20);
  b.input("x", DataType::String, Shape{2});
  b.input("sfx", DataType::String, Shape{});
  set_attrs(b.node("StringSplit", {"x"}, {"parts", "len"}), {attr_string("delimiter", ",")});
  b.node("StringConcat", {"x", "sfx"}, {"cat"});
  set_attrs(b.node("RegexFullMatch", {"x"}, {"m"}), {attr_string("pattern", "[a-z]+,\\w")});
  b.output("parts").output("len").output("cat").output("m");
  NamedTensors out = b.session().run({{"x", strs({2}, {"ab,c", "d"})}, {"sfx", strs({}, {"!"})}});
  EXPECT_EQ(out["parts"].shape(), (Shape{2, 2}));
  EXPECT_EQ(str_values(out["parts"]), (std::vector<std::string>{"ab", "c", "d", ""}));
  EXPECT_EQ(out["len"].to_int64_vector(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(str_values(out["cat"]), (std::vector<std::string>{"ab,c!", "d!"}));
  EXPECT_EQ(out["m"].to_int64_vector(), (std::vector<int64_t>{1, 0}));

  ModelBuilder n(10);
  n.input("x", DataType::String, Shape{3});
  Attribute stop;
  stop.name = "stopwords";
  stop.type = Attribute::Type::Strings;
  stop.strings = {"the"};
  set_attrs(n.node("StringNormalizer", {"x"}, {"y"}),
            {attr_string("case_change_action", "UPPER"), stop});
  n.output("y");
  NamedTensors y = n.session().run({{"x", strs({3}, {"The", "cat", "sat"})}});
  EXPECT_EQ(str_values(y["y"]), (std::vector<std::string>{"CAT", "SAT"}));
}

TEST(String, RejectsNonStringInput) {
  ModelBuilder b(20);
  b.input("x", DataType::String, Shape{1});
  b.input("y", DataType::String, Shape{1});
  b.node("StringConcat", {"x", "y"}, {"z"});
  b.output("z");
  Session s = b.session();
  expect_error(
      [&] {
        s.run({{"x", strs({1}, {"a"})}, {"y", f32({1}, {1})}});
      },
      "expects dtype string");
}

TEST(String, LabelEncoder) {
  ModelBuilder b(18, "ai.onnx.ml");
  b.input("x", DataType::String, Shape{3});
  Attribute keys, values;
  keys.name = "keys_strings";
  keys.type = Attribute::Type::Strings;
  keys.strings = {"a", "b"};
  values.name = "values_int64s";
  values.type = Attribute::Type::Ints;
  values.ints = {10, 20};
  set_attrs(b.node("LabelEncoder", {"x"}, {"y"}, "ai.onnx.ml"),
            {keys, values, attr_int("default_int64", 5)});
  b.output("y");
  NamedTensors out = b.session().run({{"x", strs({3}, {"b", "z", "a"})}});
  EXPECT_EQ(out["y"].to_int64_vector(), (std::vector<int64_t>{20, 5, 10}));
}

TEST(Signal, DftPowerOfTwoAndBluestein) {
  // Real [1, 2, 3, 4] -> [10, -2+2i, -2, -2-2i]; length 3 runs through Bluestein.
  ModelBuilder b(20);
  b.input("x", DataType::Float, Shape{1, 4, 1});
  b.input("n", DataType::Int64, Shape{});
  b.node("DFT", {"x"}, {"y"});
  b.node("DFT", {"x", "n"}, {"y3"});
  set_attrs(b.node("DFT", {"y"}, {"back"}), {attr_int("inverse", 1)});
  b.output("y").output("y3").output("back");
  NamedTensors out = b.session().run({{"x", f32({1, 4, 1}, {1, 2, 3, 4})}, {"n", i64({}, {3})}});
  EXPECT_EQ(out["y"].shape(), (Shape{1, 4, 2}));
  expect_near(out["y"], {10, 0, -2, 2, -2, 0, -2, -2});
  double h = std::sqrt(3.0) / 2;
  expect_near(out["y3"], {6, 0, -1.5, h, -1.5, -h});
  expect_near(out["back"], {1, 0, 2, 0, 3, 0, 4, 0});
}

// An empty batch with a huge dft_length gives an empty output without planning the transform
// (the plan for n = 2^40 took ~64 TB before).
TEST(Signal, DftOfAnEmptyBatchPlansNothing) {
  ModelBuilder b(20);
  b.input("x", DataType::Float, Shape{0, 4, 1});
  b.input("n", DataType::Int64, Shape{});
  b.node("DFT", {"x", "n"}, {"y"});
  b.output("y");
  NamedTensors out =
      b.session().run({{"x", Tensor::zeros(DataType::Float, {0, 4, 1})}, {"n", i64({}, {int64_t{1} << 40})}});
  EXPECT_EQ(out["y"].shape(), (Shape{0, int64_t{1} << 40, 2}));
}

TEST(Signal, DftRejectsBadTrailingDim) {
  ModelBuilder b(20);
  b.input("x", DataType::Float, Shape{1, 4, 3});
  b.node("DFT", {"x"}, {"y"});
  b.output("y");
  Session s = b.session();
  expect_error(
      [&] {
        s.run({{"x", Tensor::zeros(DataType::Float, {1, 4, 3})}});
      },
      "(real) or [..., 2]");
}

TEST(Signal, WindowsAndStft) {
  ModelBuilder b(17);
  b.input("n", DataType::Int64, Shape{});
  b.input("sig", DataType::Float, Shape{1, 6, 1});
  b.input("step", DataType::Int64, Shape{});
  b.node("HannWindow", {"n"}, {"hann"});
  set_attrs(b.node("HammingWindow", {"n"}, {"hamming"}), {attr_int("periodic", 0)});
  b.node("BlackmanWindow", {"n"}, {"black"});
  b.input("fl", DataType::Int64, Shape{});
  b.node("STFT", {"sig", "step", "", "fl"}, {"spec"});
  b.output("hann").output("hamming").output("black").output("spec");
  NamedTensors out = b.session().run({{"n", i64({}, {4})},
                                      {"sig", f32({1, 6, 1}, {1, 1, 2, 2, 3, 3})},
                                      {"step", i64({}, {2})},
                                      {"fl", i64({}, {2})}});
  expect_near(out["hann"], {0, 0.5, 1, 0.5});
  // Symmetric Hamming over 4 points: alpha - beta * cos(2 pi n / 3), alpha = 25/46.
  double a = 25.0 / 46, bb = 21.0 / 46;
  expect_near(out["hamming"], {a - bb, a + bb / 2, a + bb / 2, a - bb});
  expect_near(out["black"], {0, 0.34, 1, 0.34});
  // Frames [1,1], [2,2], [3,3]; onesided 2-point DFT gives [sum, 0] and [0, 0].
  EXPECT_EQ(out["spec"].shape(), (Shape{1, 3, 2, 2}));
  expect_near(out["spec"], {2, 0, 0, 0, 4, 0, 0, 0, 6, 0, 0, 0});
}

// MelWeightMatrix's inputs are data: an infinite upper edge gave an infinite bin cast to int64,
// and a huge num_mel_bins sized vectors before the output's size was checked.
TEST(Signal, MelWeightMatrixRejectsInfiniteEdgesAndHugeSizes) {
  auto run = [](int64_t mels, float hi) {
    ModelBuilder b(17);
    for (const char* n : {"mels", "dft", "rate"}) b.input(n, DataType::Int64, Shape{});
    b.input("lo", DataType::Float, Shape{});
    b.input("hi", DataType::Float, Shape{});
    b.node("MelWeightMatrix", {"mels", "dft", "rate", "lo", "hi"}, {"w"});
    b.output("w");
    return b.session().run({{"mels", i64({}, {mels})}, {"dft", i64({}, {16})}, {"rate", i64({}, {8000})},
                            {"lo", f32({}, {0})}, {"hi", f32({}, {hi})}});
  };
  EXPECT_EQ(run(4, 4000)["w"].shape(), (Shape{9, 4}));
  expect_error([&] { run(4, std::numeric_limits<float>::infinity()); }, "above the Nyquist bin");
  EXPECT_THROW(run(std::numeric_limits<int64_t>::max() / 4, 4000), Error);
}

TEST(Ml, BinarizerAndArrayFeatureExtractor) {
  ModelBuilder b(18, "ai.onnx.ml");
  b.input("x", DataType::Float, Shape{2, 3});
  b.input("idx", DataType::Int64, Shape{1});
  set_attrs(b.node("Binarizer", {"x"}, {"bin"}, "ai.onnx.ml"), {attr_float("threshold", 2.5f)});
  b.node("ArrayFeatureExtractor", {"x", "idx"}, {"col"}, "ai.onnx.ml");
  b.output("bin").output("col");
  Session s = b.session();
  NamedTensors out = s.run({{"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"idx", i64({1}, {2})}});
  expect_near(out["bin"], {0, 0, 1, 1, 1, 1});
  EXPECT_EQ(out["col"].shape(), (Shape{2, 1}));
  expect_near(out["col"], {3, 6});
  expect_error(
      [&] {
        s.run({{"x", f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {"idx", i64({1}, {3})}});
      },
      "out of range");
}

}  // namespace
