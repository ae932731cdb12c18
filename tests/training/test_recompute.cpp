// Activation recomputation (autodiff/recompute.h) on the torch-exported GPT-2-style decoder:
// the same loss and bit-identical gradients with one segment per block recomputed, less
// peak memory, the clones scheduled inside the backward, and clear errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "training/training_session.h"

namespace onyx {
namespace {

const std::string kGpt2 = std::string(ONYX_TORCH_TEST_DATA) + "/gpt2/model.onnx";

NamedTensors lm_batch(int64_t batch, int64_t seq, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> tok(0, 49);
  std::vector<int64_t> x(static_cast<size_t>(batch * seq)), y(x.size());
  for (auto& v : x) v = tok(rng);
  for (auto& v : y) v = tok(rng);
  return {{"tokens", Tensor::from_vector<int64_t>({batch, seq}, x)},
          {"labels", Tensor::from_vector<int64_t>({batch, seq}, y)}};
}

TrainingConfig lm_config(const std::string& recompute) {
  TrainingConfig c;
  c.loss.class_axis = -1;
  c.optimizer = {.name = "adamw", .lr = 1e-3, .weight_decay = 0.01};
  c.threads = 1;
  c.recompute.pattern = recompute;
  return c;
}

TEST(Recompute, SameGradientsLessMemoryOnGpt2) {
  TrainingSession plain(kGpt2, lm_config(""));
  TrainingSession recomputed(kGpt2, lm_config("^/h\\.\\d+/"));
  for (int s = 0; s < 3; ++s) {
    auto batch = lm_batch(8, 8, static_cast<uint32_t>(s));
    StepResult a = plain.train_step_detailed(batch);
    StepResult b = recomputed.train_step_detailed(batch);
    EXPECT_EQ(a.loss, b.loss) << "step " << s;
    Tensor ga = plain.flat_gradients(), gb = recomputed.flat_gradients();
    ASSERT_EQ(ga.nbytes(), gb.nbytes());
    EXPECT_EQ(std::memcmp(ga.raw(), gb.raw(), ga.nbytes()), 0) << "gradients differ at step " << s;
    EXPECT_LT(b.peak_bytes, a.peak_bytes) << "step " << s;
  }
}

TEST(Recompute, ClonesRunInsideTheBackward) {
  auto m = load_model(kGpt2);
  autodiff::LossSpec loss;
  loss.class_axis = -1;
  auto tg = autodiff::build_training_graph(*m, loss, {}, {.pattern = "^/h\\.\\d+/"});
  // Every clone runs after the first backward node (gradients seeded from the loss), so the
  // forward does not keep the segment's activations for it.
  auto order = tg.model->graph->topological_order();
  size_t first_backward = order.size(), first_clone = order.size(), clones = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& name = order[i]->name;
    if (first_backward == order.size() && name.find("_grad") != std::string::npos) first_backward = i;
    if (name.ends_with("/recompute")) {
      first_clone = std::min(first_clone, i);
      ++clones;
    }
  }
  EXPECT_GT(clones, 10u);
  EXPECT_GT(first_clone, first_backward);
  // Only every second block: fewer clones.
  auto half = autodiff::build_training_graph(*m, loss, {}, {.pattern = "^/h\\.\\d+/", .every = 2});
  size_t half_clones = 0;
  for (const auto& n : half.model->graph->nodes()) half_clones += n->name.ends_with("/recompute");
  EXPECT_GT(half_clones, 0u);
  EXPECT_LT(half_clones, clones);
}

TEST(Recompute, BadSpecsAreErrors) {
  EXPECT_THROW(TrainingSession(kGpt2, lm_config("nosuchnode")), Error);
  EXPECT_THROW(TrainingSession(kGpt2, lm_config("(")), Error);
  TrainingConfig c = lm_config("^/h");
  c.recompute.every = 0;
  EXPECT_THROW(TrainingSession(kGpt2, c), Error);
}

}  // namespace
}  // namespace onyx
