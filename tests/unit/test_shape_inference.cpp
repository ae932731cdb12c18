// Shape inference with data propagation (graph/shape_values.h): the run-time shape
// computations exporters write (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Expand's
// Equal/Where, Slice of a shape) keep ranks and symbolic dims.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph/onnx_io.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx {
namespace {

using test::attr_int;
using test::attr_ints;
using test::attr_string;

Tensor ints(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<int64_t>({n}, std::move(v));
}
Tensor scalar(int64_t v) { return Tensor::from_vector<int64_t>({}, {v}); }

SymShape sym(std::initializer_list<Dim> d) { return SymShape(d); }
Dim S(const char* p) { return Dim::symbol(p); }
Dim F(int64_t v) { return Dim::fixed(v); }

std::optional<SymShape> shape_of(Model& m, const std::string& name) {
  infer_types_and_shapes(m);
  const Value* v = m.graph->find_value(name);
  EXPECT_TRUE(v) << name;
  return v ? v->type.shape : std::nullopt;
}

// torch's view(B, S, heads, head_dim) of x [batch, seq, 32]: dims read from Shape(x).
TEST(ShapeDataPropagation, TorchViewKeepsSymbolicDims) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({S("batch"), S("seq"), F(32)}));
  b.initializer("i0", scalar(0)).initializer("i1", scalar(1)).initializer("ax", ints({0}));
  b.initializer("heads", ints({4})).initializer("hd", ints({8}));
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "i0"}, {"b"});
  b.node("Gather", {"s", "i1"}, {"q"});
  b.node("Unsqueeze", {"b", "ax"}, {"bu"});
  b.node("Unsqueeze", {"q", "ax"}, {"qu"});
  b.node("Concat", {"bu", "qu", "heads", "hd"}, {"target"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("Transpose", {"y"}, {"t"}).attrs["perm"] = attr_ints("perm", {0, 2, 1, 3});
  b.output("t");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "y"), sym({S("batch"), S("seq"), F(4), F(8)}));
  EXPECT_EQ(shape_of(*m, "t"), sym({S("batch"), F(4), S("seq"), F(8)}));
}

// Reshape with 0 (copy) and -1 (inferred), and arithmetic on dims (n * 4 is the symbol
// "4*n", and the -1 after it 6: the n cancels).
TEST(ShapeDataPropagation, ZeroMinusOneAndArithmetic) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({F(2), F(6), F(4)}));
  b.input("z", DataType::Float, sym({S("n"), F(6), F(4)}));
  b.initializer("t1", ints({0, -1}));
  b.initializer("i0", ints({0})).initializer("four", ints({4})).initializer("m1", ints({-1}));
  b.node("Reshape", {"x", "t1"}, {"y1"});
  b.node("Shape", {"z"}, {"sz"});
  b.node("Gather", {"sz", "i0"}, {"n"});
  b.node("Mul", {"n", "four"}, {"n4"});
  b.node("Concat", {"n4", "m1"}, {"t2"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"z", "t2"}, {"y2"});
  b.output("y1").output("y2");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "y1"), sym({F(2), F(24)}));
  EXPECT_EQ(shape_of(*m, "y2"), sym({S("4*n"), F(6)}));
}

// torch's attention mask: [batch, 1, 1, 128] expanded to heads, viewed as [batch * 12, 1, 128]
// and back as [batch, 12, -1, 128]. Products of a symbol and a positive constant are named
// "12*batch", divided back when the constant divides, and cancel in Reshape's -1; a symbol that
// appears twice cancels once; anything else stays unknown.
TEST(ShapeDataPropagation, ScaledSymbolsCancelInReshape) {
  test::ModelBuilder b(17);
  b.input("m", DataType::Float, sym({S("batch"), F(12), F(1), F(128)}));
  b.input("sq", DataType::Float, sym({S("n"), S("n")}));
  b.initializer("i0", ints({0})).initializer("twelve", ints({12})).initializer("three", ints({3}));
  b.initializer("one", ints({1})).initializer("len", ints({128})).initializer("m1", ints({-1}));
  b.initializer("zero", ints({0}));
  b.node("Shape", {"m"}, {"s"});
  b.node("Gather", {"s", "i0"}, {"batch"});
  b.node("Mul", {"batch", "twelve"}, {"bh"});
  b.node("Concat", {"bh", "one", "len"}, {"t1"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"m", "t1"}, {"flat"});
  b.node("Concat", {"batch", "twelve", "m1", "len"}, {"t2"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"flat", "t2"}, {"back"});
  b.node("Div", {"bh", "twelve"}, {"b_again"});
  b.node("Div", {"bh", "three"}, {"four_b"});
  b.node("Mul", {"batch", "zero"}, {"b0"});
  b.node("Concat", {"b_again", "four_b", "b0"}, {"t3"}).attrs["axis"] = attr_int("axis", 0);
  b.node("ConstantOfShape", {"t3"}, {"c"});
  b.node("Shape", {"sq"}, {"ssq"});
  b.node("Gather", {"ssq", "i0"}, {"n"});
  b.node("Concat", {"n", "m1"}, {"t4"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"sq", "t4"}, {"sq2"});
  b.output("back").output("c").output("sq2");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "flat"), sym({S("12*batch"), F(1), F(128)}));
  EXPECT_EQ(shape_of(*m, "back"), sym({S("batch"), F(12), F(1), F(128)}));
  auto c = shape_of(*m, "c");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)[0], S("batch"));
  EXPECT_EQ((*c)[1], S("4*batch"));
  EXPECT_FALSE((*c)[2].is_fixed());  // batch * 0 is 0, but only the kernel says so
  EXPECT_EQ(shape_of(*m, "sq2"), sym({S("n"), S("n")}));
  // The shapes inferred are the ones the run produces.
  Session s(std::move(m));
  NamedTensors out = s.run({{"m", Tensor::zeros(DataType::Float, {3, 12, 1, 128})},
                            {"sq", Tensor::zeros(DataType::Float, {5, 5})}});
  EXPECT_EQ(out.at("back").shape(), (Shape{3, 12, 1, 128}));
  EXPECT_EQ(out.at("c").shape(), (Shape{3, 12, 0}));
  EXPECT_EQ(out.at("sq2").shape(), (Shape{5, 5}));
}

// Arithmetic on shape values past int64 (16 * INT64_MAX, INT64_MIN / -1, -INT64_MIN) leaves
// the value unknown instead of an undefined overflow (found by fuzzing); the rank survives.
TEST(ShapeDataPropagation, OverflowingArithmeticIsUnknown) {
  const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  for (const char* op : {"Mul", "Add", "Div", "Mod", "Neg"}) {
    SCOPED_TRACE(op);
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, sym({F(16), F(4)}));
    b.initializer("i0", ints({0}));
    const std::string o(op);
    b.initializer("k", ints({o == "Mul" || o == "Add" ? kMax : -1}));
    b.initializer("lo", ints({kMin}));
    b.node("Shape", {"x"}, {"s"});
    b.node("Gather", {"s", "i0"}, {"n"});  // [16]
    if (o == "Neg") {
      b.node("Neg", {"lo"}, {"v"});
    } else if (o == "Div" || o == "Mod") {
      b.node(op, {"lo", "k"}, {"v"});
    } else {
      b.node(op, {"n", "k"}, {"v"});
    }
    b.node("Concat", {"v", "n"}, {"t"}).attrs["axis"] = attr_int("axis", 0);
    b.node("ConstantOfShape", {"t"}, {"y"});
    b.output("y");
    auto m = b.build();
    auto y = shape_of(*m, "y");
    ASSERT_TRUE(y);
    ASSERT_EQ(y->size(), 2u);
    EXPECT_FALSE((*y)[0].is_fixed());
    EXPECT_EQ((*y)[1], F(16));
  }
}

// Expand as torch exports expand_as: Where(Equal(shape, -1), ones, shape).
TEST(ShapeDataPropagation, ExpandThroughEqualWhere) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({F(1), F(5)}));
  b.input("like", DataType::Float, sym({S("batch"), F(5)}));
  b.initializer("minus1", ints({-1, -1})).initializer("ones", ints({1, 1}));
  b.node("Shape", {"like"}, {"s"});
  b.node("Equal", {"s", "minus1"}, {"eq"});
  b.node("Where", {"eq", "ones", "s"}, {"target"});
  b.node("Expand", {"x", "target"}, {"y"});
  b.output("y");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "y"), sym({S("batch"), F(5)}));
}

// Slice of a shape, Squeeze/Unsqueeze round trips, Mod and ConstantOfShape.
TEST(ShapeDataPropagation, SliceModConstantOfShape) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({S("b"), F(3), F(7)}));
  b.initializer("st", ints({1})).initializer("en", ints({3})).initializer("ax", ints({0}));
  b.initializer("seven", scalar(7)).initializer("five", scalar(5));
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "st", "en", "ax"}, {"tail"});
  b.node("ConstantOfShape", {"tail"}, {"zeros"});
  b.node("Mod", {"seven", "five"}, {"two"});
  b.node("Unsqueeze", {"two", "ax"}, {"two1"});
  b.node("ConstantOfShape", {"two1"}, {"v"});
  b.output("zeros").output("v");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "zeros"), sym({F(3), F(7)}));
  EXPECT_EQ(shape_of(*m, "v"), sym({F(2)}));
}

// Unknown contents still give the rank: a shape input of known length.
TEST(ShapeDataPropagation, UnknownContentsKnownRank) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({S("b"), F(12)}));
  b.input("target", DataType::Int64, sym({F(3)}));
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("Expand", {"x", "target"}, {"e"});
  b.output("y").output("e");
  auto m = b.build();
  auto y = shape_of(*m, "y");
  ASSERT_TRUE(y);
  EXPECT_EQ(y->size(), 3u);
  auto e = shape_of(*m, "e");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->size(), 3u);
}

// Static rules added with it: Squeeze, Slice, Split, Tile, Range.
TEST(ShapeInference, SqueezeSliceSplitTileRange) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({S("b"), F(1), F(10)}));
  b.initializer("ax1", ints({1})).initializer("st", ints({2})).initializer("en", ints({-1}));
  b.initializer("ax2", ints({2})).initializer("step", ints({3}));
  b.initializer("sizes", ints({4, 6})).initializer("reps", ints({1, 2, 3}));
  b.initializer("r0", scalar(0)).initializer("r1", scalar(10)).initializer("r2", scalar(3));
  b.node("Squeeze", {"x", "ax1"}, {"sq"});
  b.node("Slice", {"x", "st", "en", "ax2", "step"}, {"sl"});
  b.node("Split", {"x", "sizes"}, {"p0", "p1"}).attrs["axis"] = attr_int("axis", 2);
  b.node("Tile", {"x", "reps"}, {"ti"});
  b.node("Range", {"r0", "r1", "r2"}, {"ra"});
  for (const char* o : {"sq", "sl", "p0", "p1", "ti", "ra"}) b.output(o);
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "sq"), sym({S("b"), F(10)}));
  EXPECT_EQ(shape_of(*m, "sl"), sym({S("b"), F(1), F(3)}));  // 2, 5, 8
  EXPECT_EQ(shape_of(*m, "p0"), sym({S("b"), F(1), F(4)}));
  EXPECT_EQ(shape_of(*m, "p1"), sym({S("b"), F(1), F(6)}));
  EXPECT_EQ(shape_of(*m, "ti"), sym({S("b"), F(2), F(30)}));
  EXPECT_EQ(shape_of(*m, "ra"), sym({F(4)}));
}

// Einsum, as torch.onnx exports torch.outer (a LLaMA block's rotary angles: "i,j->ij"), bmm-like
// products with symbolic dims, ellipses that broadcast, the implicit output (letters seen once,
// alphabetical) and a diagonal; an equation that does not fit its inputs infers nothing.
TEST(ShapeInference, Einsum) {
  test::ModelBuilder b(17);
  b.input("i", DataType::Float, sym({F(16)})).input("j", DataType::Float, sym({F(8)}));
  b.input("x", DataType::Float, sym({S("b"), F(3), F(4)}));
  b.input("y", DataType::Float, sym({S("b"), F(4), F(5)}));
  b.input("e", DataType::Float, sym({F(1), F(7), F(3), F(4)}));
  b.input("y7", DataType::Float, sym({F(7), F(4), F(5)}));
  b.input("sq", DataType::Float, sym({F(6), F(6)}));
  auto eq = [&](const char* e, std::vector<std::string> in, const char* out) {
    b.node("Einsum", in, {out}).attrs["equation"] = attr_string("equation", e);
    b.output(out);
  };
  eq("i,j->ij", {"i", "j"}, "outer");
  eq("bij, bjk -> bik", {"x", "y"}, "bmm");
  eq("...ij,...jk->...ik", {"e", "y7"}, "ell");  // ellipses [1, 7] and [7]
  eq("ij,jk", {"sq", "sq"}, "implicit");
  eq("ii->i", {"sq"}, "diag");
  eq("ij,jk->ik", {"i", "j"}, "misfit");  // rank-1 inputs for two-letter terms
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "outer"), sym({F(16), F(8)}));
  EXPECT_EQ(shape_of(*m, "bmm"), sym({S("b"), F(3), F(5)}));
  EXPECT_EQ(shape_of(*m, "ell"), sym({F(1), F(7), F(3), F(5)}));
  EXPECT_EQ(shape_of(*m, "implicit"), sym({F(6), F(6)}));
  EXPECT_EQ(shape_of(*m, "diag"), sym({F(6)}));
  EXPECT_FALSE(shape_of(*m, "misfit").has_value());
}

// Range's count from constants past int64 (INT64_MIN to INT64_MAX) and Resize scales of 1e30
// or NaN leave the dimension unknown instead of an undefined conversion; the kernels name them.
TEST(ShapeInference, RangeAndResizeSizesPastInt64AreUnknown) {
  test::ModelBuilder b(19);
  b.input("x", DataType::Float, sym({F(1), F(1), F(2), F(2)}));
  b.initializer("r0", scalar(std::numeric_limits<int64_t>::min()));
  b.initializer("r1", scalar(std::numeric_limits<int64_t>::max())).initializer("r2", scalar(1));
  b.initializer("huge", Tensor::from_vector<float>({4}, {1, 1, 1e30f, std::nanf("")}));
  b.node("Range", {"r0", "r1", "r2"}, {"ra"});
  b.node("Resize", {"x", "", "huge"}, {"rs"});
  b.output("ra").output("rs");
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "ra"), sym({Dim{}}));
  EXPECT_EQ(shape_of(*m, "rs"), sym({F(1), F(1), Dim{}, Dim{}}));
}

// Out-of-range axis and perm attributes (and axes inputs) are the model's error: with the
// input's rank known, shape inference names the node and the attribute at session creation
// (it used to read out of bounds); with the rank unknown until run time, the kernel does.
struct BadAxisCase {
  std::string op;
  int64_t opset;
  std::string attr;               // the attribute (or input) the message must name
  std::vector<int64_t> value;     // its value: one axis, or a list
  bool list = false;              // an ints attribute (axes, perm) rather than an int
  bool axes_input = false;        // axes as input 1 (an initializer) instead of an attribute
};

std::vector<BadAxisCase> bad_axis_cases() {
  const int64_t huge = int64_t{1} << 40;
  std::vector<BadAxisCase> r;
  // x is [2, 3]: rank 2, so axis 2 and -3 are just outside; Flatten allows [-2, 2],
  // Unsqueeze's output has rank 3.
  for (int64_t a : {int64_t{2}, int64_t{-3}, huge}) {
    for (const char* op : {"Gather", "Concat", "Split", "Softmax", "LogSoftmax", "Hardmax",
                           "LayerNormalization"})
      r.push_back({op, 17, "axis", {a}});
    for (const char* op : {"Squeeze", "ReduceSum", "ReduceMax"})
      r.push_back({op, 11, "axes", {a}, true});
    r.push_back({"ReduceSum", 13, "axes", {a}, true, true});
    r.push_back({"Squeeze", 13, "axes", {a}, true, true});
    r.push_back({"Slice", 13, "axes", {a}, true, true});
    r.push_back({"Transpose", 17, "perm", {0, a}, true});
  }
  for (int64_t a : {int64_t{3}, int64_t{-3}, huge}) r.push_back({"Flatten", 17, "axis", {a}});
  for (int64_t a : {int64_t{3}, int64_t{-4}, huge})
    r.push_back({"Unsqueeze", 11, "axes", {a}, true});
  r.push_back({"Unsqueeze", 11, "axes", {0, 0}, true});  // would insert one axis for two
  r.push_back({"Transpose", 17, "perm", {}, true});
  r.push_back({"Transpose", 17, "perm", {0, 0}, true});
  r.push_back({"Transpose", 17, "perm", {1}, true});
  return r;
}

// Builds x [2, 3] -> op -> y (x's shape dropped with `unknown_rank`) and runs it.
void run_bad_axis(const BadAxisCase& c, bool unknown_rank) {
  test::ModelBuilder b(c.opset);
  b.input("x", DataType::Float, sym({F(2), F(3)}));
  b.initializer("i", ints({0})).initializer("st", ints({0})).initializer("en", ints({1}));
  b.initializer("scale", Tensor::from_vector<float>({3}, {1, 1, 1}));
  std::vector<std::string> ins = {"x"}, outs = {"y"};
  if (c.op == "Gather") ins.push_back("i");
  if (c.op == "Concat") ins.push_back("x");
  if (c.op == "LayerNormalization") ins.push_back("scale");
  if (c.op == "Slice") ins.insert(ins.end(), {"st", "en"});
  if (c.op == "Split") outs.push_back("y1");
  if (c.axes_input) b.initializer("axes", ints(c.value)), ins.push_back("axes");
  Node& n = b.node(c.op, ins, outs);
  if (!c.axes_input)
    n.attrs[c.attr] = c.list ? attr_ints(c.attr, c.value) : attr_int(c.attr, c.value[0]);
  b.output("y");
  auto m = b.build();
  if (unknown_rank) m->graph->inputs[0]->type.shape.reset();
  // Through the loader, as a user's model comes (it validates and infers shapes).
  const std::string bytes = serialize_model(*m);
  Session s(load_model_from_bytes(bytes.data(), bytes.size()), SessionOptions{});
  s.run({{"x", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6})}});
}

TEST(ShapeInference, OutOfRangeAxesAreNamedErrors) {
  for (const auto& c : bad_axis_cases())
    for (bool unknown_rank : {false, true}) {
      SCOPED_TRACE(fmt::format("{}-{} {} [{}]{}", c.op, c.opset, c.attr, fmt::join(c.value, ", "),
                               unknown_rank ? " (rank unknown)" : ""));
      try {
        run_bad_axis(c, unknown_rank);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(c.op + "_0"), std::string::npos) << msg;  // the node's name
        // The attribute (or input) by name; kernels say "axis" for an entry of "axes".
        EXPECT_NE(msg.find(c.attr == "axes" ? "axis" : c.attr), std::string::npos) << msg;
      }
    }
}

// Attention (3-D with grouped heads and a past cache) and RotaryEmbedding keep their shapes, so
// a layer after them still has ranks for its gradient rules.
TEST(ShapeInference, AttentionAndRotaryEmbedding) {
  test::ModelBuilder b(23);
  b.input("q", DataType::Float, sym({S("b"), S("s"), F(32)}));
  b.input("k", DataType::Float, sym({S("b"), S("s"), F(16)}));
  b.input("v", DataType::Float, sym({S("b"), S("s"), F(24)}));
  b.input("pk", DataType::Float, sym({S("b"), F(2), F(5), F(8)}));
  b.input("pv", DataType::Float, sym({S("b"), F(2), F(5), F(12)}));
  b.input("q4", DataType::Float, sym({F(2), F(4), F(3), F(8)}));
  b.input("kv4", DataType::Float, sym({F(2), F(2), F(7), F(8)}));
  b.input("cos", DataType::Float, sym({F(2), F(3), F(4)}));
  test::set_attrs(b.node("Attention", {"q", "k", "v", "", "pk", "pv"}, {"y", "pres_k", "pres_v"}),
                  {attr_int("q_num_heads", 4), attr_int("kv_num_heads", 2)});
  b.node("Attention", {"q4", "kv4", "kv4"}, {"y4", "", "", "qk"});
  b.node("RotaryEmbedding", {"q4", "cos", "cos"}, {"r"});
  for (const char* o : {"y", "pres_k", "pres_v", "y4", "qk", "r"}) b.output(o);
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "y"), sym({S("b"), S("s"), F(48)}));  // 4 q heads of 24 / 2
  EXPECT_EQ(shape_of(*m, "pres_k"), sym({S("b"), F(2), Dim{}, F(8)}));
  EXPECT_EQ(shape_of(*m, "pres_v"), sym({S("b"), F(2), Dim{}, F(12)}));
  EXPECT_EQ(shape_of(*m, "y4"), sym({F(2), F(4), F(3), F(8)}));
  EXPECT_EQ(shape_of(*m, "qk"), sym({F(2), F(4), F(3), F(7)}));
  EXPECT_EQ(shape_of(*m, "r"), sym({F(2), F(4), F(3), F(8)}));
}

// Convolutions and pools keep X's rank, batch and channels (spatial sizes unknown), so a
// Resize, MatMul or GridSample after them still knows its input's rank.
TEST(ShapeInference, ConvAndPoolsKeepRankAndChannels) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, sym({S("n"), F(3), F(8), F(8)}));
  b.input("xs", DataType::Float, sym({S("n"), F(3), S("h"), F(8)}));
  b.input("w", DataType::Float, sym({F(6), F(3), F(3), F(3)}));
  b.input("wt", DataType::Float, sym({F(6), F(2), F(2), F(2)}));
  b.node("Conv", {"x", "w"}, {"c"});
  test::set_attrs(b.node("ConvTranspose", {"c", "wt"}, {"t"}), {attr_int("group", 3)});
  test::set_attrs(b.node("MaxPool", {"x"}, {"m", "mi"}), {attr_ints("kernel_shape", {2, 2})});
  b.node("GlobalAveragePool", {"x"}, {"g"});
  b.node("Conv", {"xs", "w"}, {"cs"});  // a symbolic spatial size stays unknown
  for (const char* o : {"c", "t", "m", "mi", "g", "cs"}) b.output(o);
  auto m = b.build();
  EXPECT_EQ(shape_of(*m, "c"), sym({S("n"), F(6), F(6), F(6)}));
  EXPECT_EQ(shape_of(*m, "t"), sym({S("n"), F(6), F(7), F(7)}));
  EXPECT_EQ(shape_of(*m, "m"), sym({S("n"), F(3), F(7), F(7)}));
  EXPECT_EQ(shape_of(*m, "mi"), sym({S("n"), F(3), F(7), F(7)}));
  EXPECT_EQ(shape_of(*m, "g"), sym({S("n"), F(3), F(1), F(1)}));
  EXPECT_EQ(shape_of(*m, "cs"), sym({S("n"), F(6), Dim{}, Dim{}}));
}

// The spatial sizes inferred for convolutions and pools are the sizes the kernels produce:
// strides, dilations, explicit and SAME pads, ceil_mode, output_padding and output_shape.
TEST(ShapeInference, WindowSizesMatchTheKernels) {
  struct Case {
    std::string op;
    Shape x, w;  // w empty for pools
    std::vector<Attribute> attrs;
  };
  const std::vector<Case> cases = {
      {"Conv", {1, 2, 9, 7}, {4, 2, 3, 2}, {attr_ints("strides", {2, 3}), attr_ints("pads", {1, 0, 2, 1})}},
      {"Conv", {2, 2, 10}, {3, 2, 3}, {attr_ints("dilations", {3}), attr_ints("strides", {2})}},
      {"Conv", {1, 4, 7, 5}, {4, 1, 3, 3}, {attr_int("group", 4), attr_string("auto_pad", "SAME_UPPER"), attr_ints("strides", {2, 2})}},
      {"Conv", {1, 2, 6, 6}, {2, 2, 3, 3}, {attr_string("auto_pad", "VALID"), attr_ints("pads", {1, 1, 1, 1})}},
      {"Conv", {1, 1, 5, 5, 4}, {2, 1, 2, 3, 1}, {attr_ints("kernel_shape", {2, 3, 1})}},
      {"ConvTranspose", {1, 2, 4, 3}, {2, 3, 3, 3}, {attr_ints("strides", {2, 3}), attr_ints("output_padding", {1, 2}), attr_ints("pads", {1, 0, 0, 1})}},
      {"ConvTranspose", {1, 2, 5}, {2, 1, 3}, {attr_ints("strides", {2}), attr_ints("output_shape", {10})}},
      {"ConvTranspose", {1, 2, 5}, {2, 1, 4}, {attr_ints("strides", {3}), attr_string("auto_pad", "SAME_LOWER")}},
      {"ConvTranspose", {1, 4, 3, 3}, {4, 1, 2, 2}, {attr_int("group", 2), attr_ints("dilations", {2, 2})}},
      {"MaxPool", {1, 3, 9, 8}, {}, {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_int("ceil_mode", 1)}},
      {"MaxPool", {1, 3, 10, 10}, {}, {attr_ints("kernel_shape", {3, 2}), attr_ints("strides", {3, 3}), attr_ints("pads", {1, 1, 1, 0}), attr_int("ceil_mode", 1)}},
      {"MaxPool", {2, 1, 11}, {}, {attr_ints("kernel_shape", {2}), attr_ints("dilations", {3}), attr_string("auto_pad", "SAME_UPPER")}},
      {"AveragePool", {1, 2, 7, 7}, {}, {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1}), attr_int("ceil_mode", 1), attr_int("count_include_pad", 1)}},
      {"LpPool", {1, 2, 6, 5}, {}, {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 1})}},
  };
  for (const Case& c : cases) {
    std::string what = fmt::format("{} X {} W {}", c.op, shape_str(c.x), shape_str(c.w));
    SCOPED_TRACE(what);
    test::ModelBuilder b(19);
    b.input("x", DataType::Float, c.x);
    std::vector<std::string> ins = {"x"};
    if (!c.w.empty()) {
      b.initializer("w", Tensor::from_vector<float>(c.w, std::vector<float>(shape_numel(c.w), 0.5f)));
      ins.push_back("w");
    }
    test::set_attrs(b.node(c.op, ins, {"y"}), c.attrs);
    b.output("y");
    auto m = b.build();
    auto inferred = shape_of(*m, "y");
    ASSERT_TRUE(inferred);
    Session s(std::move(m), SessionOptions{});
    Tensor y = s.run({{"x", Tensor::from_vector<float>(c.x, std::vector<float>(shape_numel(c.x), 1.0f))}})
                   .at("y");
    SymShape want;
    for (int64_t d : y.shape()) want.push_back(F(d));
    EXPECT_EQ(*inferred, want) << what << ": kernel gives " << shape_str(y.shape());
  }
}

// Found by tests/fuzz/fuzz_model.cpp: dimension arithmetic on declared sizes overflowed int64
// (undefined behaviour, then a wrapped size): Tile by 2 of a dim near 2^62, Concat, Flatten,
// ConvTranspose with a huge stride. Each is an onyx::Error naming the node.
TEST(ShapeInference, DimensionOverflowIsANamedError) {
  const int64_t big = int64_t{1} << 62;
  auto expect_overflow = [](test::ModelBuilder& b, const std::string& node) {
    auto m = b.build();
    try {
      infer_types_and_shapes(*m);
      ADD_FAILURE() << node << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(node), std::string::npos) << msg;
      EXPECT_NE(msg.find("overflows int64"), std::string::npos) << msg;
    }
  };
  {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, sym({F(big), F(3)}));
    b.initializer("r", ints({2, 1}));
    b.node("Tile", {"x", "r"}, {"y"}).name = "tile";
    b.output("y");
    expect_overflow(b, "tile");
  }
  {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, sym({F(big), F(3)}));
    b.input("z", DataType::Float, sym({F(big), F(3)}));
    Node& n = b.node("Concat", {"x", "z", "x"}, {"y"});
    n.name = "cat";
    n.attrs["axis"] = attr_int("axis", 0);
    b.output("y");
    expect_overflow(b, "cat");
  }
  {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, sym({F(big), F(8)}));
    Node& n = b.node("Flatten", {"x"}, {"y"});
    n.name = "flat";
    n.attrs["axis"] = attr_int("axis", 0);
    b.output("y");
    expect_overflow(b, "flat");
  }
  {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, sym({F(1), F(1), F(1000)}));
    b.initializer("w", Tensor::zeros(DataType::Float, {1, 1, 3}));
    Node& n = b.node("ConvTranspose", {"x", "w"}, {"y"});
    n.name = "deconv";
    n.attrs["strides"] = attr_ints("strides", {big});
    b.output("y");
    expect_overflow(b, "deconv");
  }
}

}  // namespace
}  // namespace onyx
