// graph/sequence_lowering: indexed SplitToSequence becomes Slice/Gather; sequences read any
// other way stay, and the lowered graph computes what the sequence kernels compute.
#include "graph/sequence_lowering.h"

#include <gtest/gtest.h>

#include "graph/shape_inference.h"
#include "test_util.h"

using namespace onyx;
using onyx::test::attr_int;
using onyx::test::ModelBuilder;

namespace {

size_t count(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->op_type == op;
  return n;
}

/// x [batch, 6] split into pieces of `chunk` along axis 1, read at `positions` (y0, y1, ...).
ModelBuilder split_read_at(const SymShape& x_shape, int64_t chunk, std::vector<int64_t> positions) {
  ModelBuilder b(18);
  b.input("x", DataType::Float, x_shape);
  b.initializer("chunk", Tensor::scalar<int64_t>(chunk));
  onyx::test::set_attrs(b.node("SplitToSequence", {"x", "chunk"}, {"seq"}), {attr_int("axis", 1)});
  for (size_t i = 0; i < positions.size(); ++i) {
    std::string k = "k" + std::to_string(i), y = "y" + std::to_string(i);
    b.initializer(k, Tensor::scalar<int64_t>(positions[i]));
    b.node("SequenceAt", {"seq", k}, {y});
    b.output(y);
  }
  return b;
}

}  // namespace

TEST(SequenceLowering, IndexedPiecesBecomeSlicesWithTheSameValues) {
  const SymShape shape = {Dim::symbol("batch"), Dim::fixed(7)};
  auto reference = split_read_at(shape, 3, {0, 2, -2}).session();
  auto b = split_read_at(shape, 3, {0, 2, -2});
  auto model = b.build();
  infer_types_and_shapes(*model);
  EXPECT_EQ(lower_indexed_sequences(*model->graph), 1);
  infer_types_and_shapes(*model);
  EXPECT_EQ(count(*model->graph, "SplitToSequence"), 0u);
  EXPECT_EQ(count(*model->graph, "SequenceAt"), 0u);
  EXPECT_EQ(count(*model->graph, "Slice"), 3u);
  std::vector<float> xs(14);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i) * 0.5f - 3;
  NamedTensors feeds = {{"x", Tensor::from_vector<float>({2, 7}, xs)}};
  Session lowered(std::move(model), {.intra_op_threads = 1});
  auto want = reference.run(feeds);
  auto got = lowered.run(feeds);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const std::string y = "y" + std::to_string(i);
    EXPECT_EQ(got.at(y).shape(), want.at(y).shape()) << y;
    EXPECT_EQ(got.at(y).to_double_vector(), want.at(y).to_double_vector()) << y;
  }
  EXPECT_EQ(got.at("y2").shape(), (Shape{2, 3}));  // -2 of 3 pieces: the middle one
}

TEST(SequenceLowering, SequencesReadOtherwiseAreLeftAlone) {
  auto lowered = [](ModelBuilder b) {
    auto model = b.build();
    infer_types_and_shapes(*model);
    int n = lower_indexed_sequences(*model->graph);
    EXPECT_EQ(count(*model->graph, "SplitToSequence"), 1u);
    return n;
  };
  // A negative position with a scalar split over a dim nobody knows: the piece count is unknown.
  EXPECT_EQ(lowered(split_read_at({Dim::fixed(2), Dim::symbol("n")}, 3, {-1})), 0);
  // The same position over a known dim is lowered.
  {
    auto model = split_read_at({Dim::fixed(2), Dim::fixed(6)}, 3, {-1}).build();
    infer_types_and_shapes(*model);
    EXPECT_EQ(lower_indexed_sequences(*model->graph), 1);
  }
  // A position computed at run time.
  {
    ModelBuilder b(18);
    b.input("x", DataType::Float, Shape{2, 6});
    b.input("k", DataType::Int64, Shape{});
    b.node("SplitToSequence", {"x"}, {"seq"});
    b.node("SequenceAt", {"seq", "k"}, {"y"});
    b.output("y");
    EXPECT_EQ(lowered(std::move(b)), 0);
  }
  // The sequence is also concatenated, or is a graph output.
  {
    auto b = split_read_at({Dim::fixed(2), Dim::fixed(6)}, 2, {0});
    onyx::test::set_attrs(b.node("ConcatFromSequence", {"seq"}, {"cat"}), {attr_int("axis", 0)});
    b.output("cat");
    EXPECT_EQ(lowered(std::move(b)), 0);
  }
  {
    auto b = split_read_at({Dim::fixed(2), Dim::fixed(6)}, 2, {0});
    b.output("seq");
    EXPECT_EQ(lowered(std::move(b)), 0);
  }
  // A position past the last piece stays for the kernel to report.
  EXPECT_EQ(lowered(split_read_at({Dim::fixed(2), Dim::fixed(6)}, 3, {2})), 0);
}
