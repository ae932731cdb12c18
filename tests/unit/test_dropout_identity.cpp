// A Dropout of constant ratio 0 is the identity in training mode too (every element kept at scale
// 1): its gradient rule (autodiff/rules_activation.cpp) passes dy through without asking for the
// mask, and the optimizer (drop_zero_ratio_dropouts) turns such a Dropout whose mask nobody reads
// into an Identity. torch.onnx writes one per nn.Dropout(p=0.0) in a training-mode export (three
// a layer in nn.TransformerEncoderLayer(dropout=0.0)). Other Dropouts stay.
#include <gtest/gtest.h>

#include "autodiff/training_graph.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

/// y = x * s, through a Dropout of `ratio` (none: no Dropout at all) in training mode.
std::unique_ptr<Model> scaled(std::optional<float> ratio, bool mask_out = false) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{4, 6});
  b.initializer("s", randn({6}, 5, 0.5));
  if (!ratio) {
    b.node("Mul", {"x", "s"}, {"y"});
  } else {
    b.initializer("ratio", Tensor::scalar<float>(*ratio));
    b.initializer("training", Tensor::scalar<bool>(true));
    b.node("Mul", {"x", "s"}, {"m"});
    if (mask_out)
      b.node("Dropout", {"m", "ratio", "training"}, {"y", "mask"});
    else
      b.node("Dropout", {"m", "ratio", "training"}, {"y"});
    if (mask_out) b.output("mask");
  }
  b.output("y");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

}  // namespace

TEST(DropoutIdentity, ZeroRatioTrainsExactlyAsWithoutIt) {
  autodiff::LossSpec spec{.kind = "mse"};
  const autodiff::TrainingGraph with = autodiff::build_training_graph(*scaled(0.0f), spec, {"s"});
  const autodiff::TrainingGraph without =
      autodiff::build_training_graph(*scaled(std::nullopt), spec, {"s"});
  // The rule asked for no mask: nothing reads one.
  for (const auto& n : with.model->graph->nodes()) {
    if (n->op_type == "Dropout" && n->outputs.size() > 1 && n->outputs[1]) {
      EXPECT_TRUE(n->outputs[1]->consumers.empty()) << "the gradient reads the mask";
    }
  }
  const NamedTensors feeds{{"x", randn({4, 6}, 7, 1.0)}, {"labels", randn({4, 6}, 8, 1.0)}};
  const Session plain = session_of(*without.model, OptLevel::All, 1);
  for (OptLevel level : {OptLevel::None, OptLevel::All}) {
    const Session s = session_of(*with.model, level, 1);
    EXPECT_EQ(op_counts(s)[":Dropout"], level == OptLevel::None ? 1 : 0);
    RunOptions ro;
    ro.seed = 3;
    const NamedTensors a = s.run(feeds, {}, ro), b = plain.run(feeds, {}, ro);
    expect_same_bits(a.at(with.loss), b.at(without.loss), "loss");
    expect_same_bits(a.at(with.grads[0]), b.at(without.grads[0]), "ds");
  }
}

TEST(DropoutIdentity, OtherDropoutsStay) {
  const NamedTensors feeds{{"x", randn({4, 6}, 7, 1.0)}};
  // Ratio 0, nobody reads the mask: an Identity, y = x * s exactly.
  {
    const Session s = session_of(*scaled(0.0f), OptLevel::All, 1);
    EXPECT_EQ(op_counts(s)[":Dropout"], 0);
    const Session plain = session_of(*scaled(std::nullopt), OptLevel::All, 1);
    expect_same_bits(s.run(feeds).at("y"), plain.run(feeds).at("y"), "y");
  }
  // A ratio above 0, or the mask read (a graph output): Dropout runs.
  EXPECT_EQ(op_counts(session_of(*scaled(0.1f), OptLevel::All, 1))[":Dropout"], 1);
  const Session masked = session_of(*scaled(0.0f, /*mask_out=*/true), OptLevel::All, 1);
  EXPECT_EQ(op_counts(masked)[":Dropout"], 1);
  const Tensor mask = masked.run(feeds).at("mask");
  for (int64_t i = 0; i < mask.numel(); ++i) EXPECT_TRUE(mask.data<bool>()[i]);
}

}  // namespace onyx::test
