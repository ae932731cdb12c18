// The attention mask's fusion (inference/fusions_softmax.cpp) and the ai.onyx AddSoftmax kernel
// (kernels/cpu/add_softmax.cpp): Softmax(scores + mask) along the last axis becomes one
// AddSoftmax with the same bits, for the mask forms encoders use, either operand order and the
// opset-11 Softmax; look-alikes (another axis, operands that both broadcast, a sum read
// elsewhere, float64) are left alone; the kernel names a mask that does not broadcast.
#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx::test {
namespace {

Session loaded(ModelBuilder& b, OptLevel level) {
  std::string bytes = serialize_model(*b.build());
  SessionOptions opts;
  opts.opt_level = level;
  opts.intra_op_threads = 2;
  return Session::from_bytes(bytes.data(), bytes.size(), opts);
}

/// scores [batch, 4, 8, 8] plus a mask of `mask_shape` (in that order unless `mask_first`),
/// then Softmax at `axis` (unset: the opset's default) in a model of `opset`.
void build_masked_softmax(ModelBuilder& b, const SymShape& mask_shape, bool mask_first,
                          std::optional<int64_t> axis) {
  b.input("scores", DataType::Float,
          SymShape{Dim::symbol("batch"), Dim::fixed(4), Dim::fixed(8), Dim::fixed(8)});
  b.input("mask", DataType::Float, mask_shape);
  if (mask_first)
    b.node("Add", {"mask", "scores"}, {"sum"});
  else
    b.node("Add", {"scores", "mask"}, {"sum"});
  Node& s = b.node("Softmax", {"sum"}, {"p"});
  if (axis) s.attrs["axis"] = attr_int("axis", *axis);
  b.output("p");
}

/// Scores with large values (the softmax must subtract the row maximum) and a mask of 0 and
/// torch's -3.4e38 / -inf for masked keys (never a whole row).
NamedTensors masked_feeds(int64_t batch, const Shape& mask_shape) {
  Tensor scores = randn({batch, 4, 8, 8}, 11, 30.0);
  Tensor mask = Tensor::zeros(DataType::Float, mask_shape);
  float* m = mask.data<float>();
  for (int64_t i = 0; i < mask.numel(); ++i)
    if (i % 8 == 7) m[i] = -std::numeric_limits<float>::infinity();
    else if (i % 5 == 3) m[i] = -3.4e38f;
  return {{"scores", scores}, {"mask", mask}};
}

}  // namespace

TEST(AddSoftmaxFusion, MaskedScoresBecomeOneAddSoftmaxWithTheSameBits) {
  struct Case {
    SymShape mask;
    Shape mask_at_batch3;
    bool mask_first;
    int64_t opset;
    std::optional<int64_t> axis;
  };
  const Case cases[] = {
      // torch's key padding mask [batch, 1, 1, seq], opset 17's default axis
      {{Dim::symbol("batch"), Dim::fixed(1), Dim::fixed(1), Dim::fixed(8)}, {3, 1, 1, 8}, false, 17, {}},
      // a per-head bias [4, 1, 8] added first, axis -1 spelled out
      {{Dim::fixed(4), Dim::fixed(1), Dim::fixed(8)}, {4, 1, 8}, true, 17, -1},
      // a causal mask [8, 8], opset 11 with axis 3 (the last: the 2-D coercion is the row)
      {{Dim::fixed(8), Dim::fixed(8)}, {8, 8}, false, 11, 3},
      // a full-size bias
      {{Dim::symbol("batch"), Dim::fixed(4), Dim::fixed(8), Dim::fixed(8)}, {3, 4, 8, 8}, false, 13, 3},
  };
  for (const Case& c : cases) {
    ModelBuilder fb(c.opset), pb(c.opset);
    build_masked_softmax(fb, c.mask, c.mask_first, c.axis);
    build_masked_softmax(pb, c.mask, c.mask_first, c.axis);
    Session fused = loaded(fb, OptLevel::All), plain = loaded(pb, OptLevel::None);
    auto ops = op_counts(fused);
    EXPECT_EQ(ops["ai.onyx:AddSoftmax"], 1) << c.mask_at_batch3.size();
    EXPECT_EQ(ops[":Add"] + ops[":Softmax"], 0);
    const NamedTensors feeds = masked_feeds(3, c.mask_at_batch3);
    expect_same_bits(fused.run(feeds).at("p"), plain.run(feeds).at("p"), "p");
  }
}

TEST(AddSoftmaxFusion, LookalikesAreLeftAlone) {
  const SymShape x{Dim::fixed(2), Dim::fixed(4), Dim::fixed(8), Dim::fixed(8)};
  auto check = [](ModelBuilder& fb, ModelBuilder& pb, const NamedTensors& feeds,
                  const char* what) {
    Session fused = loaded(fb, OptLevel::All), plain = loaded(pb, OptLevel::None);
    EXPECT_EQ(op_counts(fused)["ai.onyx:AddSoftmax"], 0) << what;
    const NamedTensors a = fused.run(feeds), b = plain.run(feeds);
    for (const auto& [name, t] : b) expect_same_bits(a.at(name), t, what);
  };
  NamedTensors feeds{{"scores", randn({2, 4, 8, 8}, 3)}, {"mask", randn({2, 1, 1, 8}, 4)}};
  {  // another axis
    ModelBuilder fb(17), pb(17);
    for (ModelBuilder* b : {&fb, &pb}) {
      b->input("scores", DataType::Float, x);
      b->input("mask", DataType::Float, Shape{2, 1, 1, 8});
      b->node("Add", {"scores", "mask"}, {"sum"});
      b->node("Softmax", {"sum"}, {"p"}).attrs["axis"] = attr_int("axis", 2);
      b->output("p");
    }
    check(fb, pb, feeds, "axis 2");
  }
  {  // the sum is also an output
    ModelBuilder fb(17), pb(17);
    for (ModelBuilder* b : {&fb, &pb}) {
      b->input("scores", DataType::Float, x);
      b->input("mask", DataType::Float, Shape{2, 1, 1, 8});
      b->node("Add", {"scores", "mask"}, {"sum"});
      b->node("Softmax", {"sum"}, {"p"});
      b->output("p").output("sum");
    }
    check(fb, pb, feeds, "sum read elsewhere");
  }
  {  // each operand grows the other: [2, 4, 1, 8] + [2, 1, 8, 8] (either one of the sum's
     // shape would do, in either order: addition commutes bit for bit)
    ModelBuilder fb(17), pb(17);
    for (ModelBuilder* b : {&fb, &pb}) {
      b->input("scores", DataType::Float, Shape{2, 4, 1, 8});
      b->input("mask", DataType::Float, Shape{2, 1, 8, 8});
      b->node("Add", {"scores", "mask"}, {"sum"});
      b->node("Softmax", {"sum"}, {"p"});
      b->output("p");
    }
    check(fb, pb, {{"scores", randn({2, 4, 1, 8}, 5)}, {"mask", randn({2, 1, 8, 8}, 6)}},
          "broadcast both ways");
  }
  {  // float64
    ModelBuilder fb(17), pb(17);
    for (ModelBuilder* b : {&fb, &pb}) {
      b->input("scores", DataType::Double, x);
      b->input("mask", DataType::Double, Shape{2, 1, 1, 8});
      b->node("Add", {"scores", "mask"}, {"sum"});
      b->node("Softmax", {"sum"}, {"p"});
      b->output("p");
    }
    check(fb, pb,
          {{"scores", randn({2, 4, 8, 8}, 7, 1.0, DataType::Double)},
           {"mask", randn({2, 1, 1, 8}, 8, 1.0, DataType::Double)}},
          "float64");
  }
}

TEST(AddSoftmax, MaskThatDoesNotBroadcastIsAnErrorAndTheSessionStaysUsable) {
  ModelBuilder b(17, "ai.onyx");
  b.input("x", DataType::Float, Shape{2, 3, 8});
  b.input("m", DataType::Float, SymShape{Dim::symbol("a"), Dim::symbol("b")});
  b.node("AddSoftmax", {"x", "m"}, {"y"}, "ai.onyx");
  b.output("y");
  Session s = b.session();
  const Tensor x = randn({2, 3, 8}, 9);
  try {
    s.run({{"x", x}, {"m", randn({3, 4}, 10)}});
    ADD_FAILURE() << "no error for a [3, 4] mask on [2, 3, 8]";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must broadcast"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 1 or 8"), std::string::npos) << e.what();
  }
  // A [3, 1] mask: one value per row, which softmax cancels.
  const Tensor y = s.run({{"x", x}, {"m", randn({3, 1}, 10)}}).at("y");
  ASSERT_EQ(y.shape(), (Shape{2, 3, 8}));
  for (int64_t row = 0; row < 6; ++row) {
    double sum = 0;
    for (int j = 0; j < 8; ++j) sum += y.data<float>()[row * 8 + j];
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

}  // namespace onyx::test
