// Activation recomputation (autodiff/recompute.h) on the torch-exported GPT-2-style decoder:
// the same loss and bit-identical gradients with one segment per block recomputed or with the
// segments a memory budget chooses, less peak memory, the clones scheduled inside the
// backward, the budget planned from the first batch when shapes are symbolic, and clear errors.
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

TrainingConfig budget_config(int64_t budget) {
  TrainingConfig c = lm_config("");
  c.recompute.budget_bytes = budget;
  return c;
}

/// Trains `a` and `b` for 3 steps on the same batches: the same losses and gradients bit for
/// bit, and b's peak below a's.
void expect_same_training_less_memory(TrainingSession& a, TrainingSession& b, int64_t batch) {
  for (int s = 0; s < 3; ++s) {
    auto data = lm_batch(batch, 8, static_cast<uint32_t>(s));
    StepResult ra = a.train_step_detailed(data);
    StepResult rb = b.train_step_detailed(data);
    EXPECT_EQ(ra.loss, rb.loss) << "step " << s;
    Tensor ga = a.flat_gradients(), gb = b.flat_gradients();
    ASSERT_EQ(ga.nbytes(), gb.nbytes());
    EXPECT_EQ(std::memcmp(ga.raw(), gb.raw(), ga.nbytes()), 0) << "gradients differ at step " << s;
    EXPECT_LT(rb.peak_bytes, ra.peak_bytes) << "step " << s;
  }
}

/// The planned peak of the unchanged graph (an unbinding budget only estimates) for batch x 8.
int64_t planned_peak_without_recompute(int64_t batch) {
  TrainingConfig c = budget_config(int64_t(1) << 50);
  c.recompute.input_shapes = {{"tokens", {batch, 8}}, {"labels", {batch, 8}}};
  TrainingSession ts(kGpt2, c);
  const autodiff::RecomputeReport& r = ts.recompute_report();
  EXPECT_EQ(r.chosen, 0u);
  EXPECT_EQ(r.planned_peak_after, r.planned_peak_before);
  return r.planned_peak_before;
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

// Without a pattern the budget's candidates are the stretches between the forward graph's
// cut points: in a pre-LN decoder the residual stream alone crosses the boundary after each
// residual Add, so each block gives two (attention, MLP).
TEST(Recompute, BudgetChoosesBlocksBetweenCutPoints) {
  const int64_t full = planned_peak_without_recompute(16);
  ASSERT_GT(full, 0);
  // Half the planned peak: the plan is made on the graph before the optimizer, whose fused
  // attention backward (Where-masked here) alone takes the step's real peak to ~0.7 of it
  // (2.13 -> 1.49 MB), so a 3/4 budget no longer needs a recomputation to be met.
  TrainingConfig c = budget_config(full / 2);
  c.recompute.input_shapes = {{"tokens", {16, 8}}, {"labels", {16, 8}}};
  TrainingSession plain(kGpt2, lm_config(""));
  TrainingSession budgeted(kGpt2, c);
  const autodiff::RecomputeReport& r = budgeted.recompute_report();
  EXPECT_EQ(r.candidates, 5u) << "2 blocks x (attention, MLP) + the head: " << r.summary();
  EXPECT_GE(r.chosen, 1u);
  EXPECT_LT(r.chosen, r.candidates) << "a 1/2 budget should not need every segment";
  EXPECT_EQ(r.planned_peak_before, full);
  EXPECT_LE(r.planned_peak_after, c.recompute.budget_bytes);
  EXPECT_GT(r.cloned_nodes, 0u);
  ASSERT_EQ(r.segments.size(), r.chosen);
  for (const std::string& name : r.segments) EXPECT_NE(name.find("/h."), std::string::npos) << name;
  EXPECT_NE(r.summary().find("planned peak activation memory"), std::string::npos) << r.summary();
  expect_same_training_less_memory(plain, budgeted, 16);
}

// A budget over a pattern chooses among the pattern's segments; a tighter budget recomputes more.
TEST(Recompute, BudgetOverPatternSegments) {
  const int64_t full = planned_peak_without_recompute(16);
  auto plan = [](int64_t budget) {
    TrainingConfig c = lm_config("^/h\\.\\d+/");
    c.recompute.budget_bytes = budget;
    c.recompute.input_shapes = {{"tokens", {16, 8}}, {"labels", {16, 8}}};
    return TrainingSession(kGpt2, c).recompute_report();
  };
  autodiff::RecomputeReport one = plan(full * 9 / 10);
  EXPECT_EQ(one.candidates, 2u) << one.summary();
  EXPECT_EQ(one.chosen, 1u) << one.summary();
  EXPECT_LE(one.planned_peak_after, full * 9 / 10) << one.summary();
  autodiff::RecomputeReport both = plan(one.planned_peak_after - 1);
  EXPECT_EQ(both.chosen, 2u) << both.summary();
  EXPECT_LT(both.planned_peak_after, one.planned_peak_after) << both.summary();
}

// The model's batch and sequence dims are symbolic: the budget is planned for the first batch
// (the training graph is rebuilt at the first step), and training matches the plain session.
TEST(Recompute, BudgetPlannedFromTheFirstBatch) {
  const int64_t full = planned_peak_without_recompute(16);
  TrainingSession plain(kGpt2, lm_config(""));
  TrainingSession budgeted(kGpt2, budget_config(full / 2));
  EXPECT_EQ(budgeted.recompute_report().candidates, 0u) << "nothing is planned before a batch";
  expect_same_training_less_memory(plain, budgeted, 16);
  const autodiff::RecomputeReport& r = budgeted.recompute_report();
  EXPECT_EQ(r.planned_peak_before, full);
  EXPECT_LE(r.planned_peak_after, full / 2);
  EXPECT_GT(r.chosen, 0u);
  // The training graph the session reports is the rebuilt one.
  size_t clones = 0;
  for (const auto& n : budgeted.training_model().graph->nodes()) clones += n->name.ends_with("/recompute");
  EXPECT_EQ(clones, r.cloned_nodes);
}

// A budget below what recomputing every candidate reaches is refused, naming that minimum.
TEST(Recompute, UnreachableBudgetNamesTheMinimum) {
  TrainingConfig c = budget_config(1024);
  c.recompute.input_shapes = {{"tokens", {16, 8}}, {"labels", {16, 8}}};
  try {
    TrainingSession ts(kGpt2, c);
    FAIL() << "a 1 KiB budget was accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("within 0.0 MiB is out of reach"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at the least"), std::string::npos) << msg;
  }
  // Deferred to the first batch, the same refusal comes from the first step.
  TrainingSession deferred(kGpt2, budget_config(1024));
  EXPECT_THROW(deferred.train_step(lm_batch(16, 8, 0)), Error);
}

TEST(Recompute, BadSpecsAreErrors) {
  EXPECT_THROW(TrainingSession(kGpt2, lm_config("nosuchnode")), Error);
  EXPECT_THROW(TrainingSession(kGpt2, lm_config("(")), Error);
  TrainingConfig c = lm_config("^/h");
  c.recompute.every = 0;
  EXPECT_THROW(TrainingSession(kGpt2, c), Error);
  // every picks pattern segments by position; a budget picks them by size.
  c.recompute.every = 2;
  c.recompute.budget_bytes = 1 << 20;
  EXPECT_THROW(TrainingSession(kGpt2, c), Error);
  // Shapes that do not fit the model's inputs.
  TrainingConfig d = budget_config(1 << 20);
  d.recompute.input_shapes = {{"tokens", {16, 8, 1}}};
  EXPECT_THROW(TrainingSession(kGpt2, d), Error);
  d.recompute.input_shapes = {{"nosuchinput", {16, 8}}};
  EXPECT_THROW(TrainingSession(kGpt2, d), Error);
}

}  // namespace
}  // namespace onyx
