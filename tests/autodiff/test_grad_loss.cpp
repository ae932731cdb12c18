// Finite-difference checks of the loss-op gradient rules (float64): SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss with weights, ignore_index (in range and negative), every
// reduction, [N, C] and [N, C, d1, d2] scores, int64 and int32 targets.
#include "grad_check.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using test::attr_int;
using test::attr_string;

struct LossCase {
  Shape scores;
  std::vector<double> labels;
  bool weights = false;
  std::optional<int64_t> ignore;
  DataType label_dtype = DataType::Int64;
};

Shape label_shape(const Shape& scores) {
  Shape s = scores;
  s.erase(s.begin() + 1);
  return s;
}

std::vector<LossCase> loss_cases() {
  return {
      {{3, 4}, {0, 3, 1}},
      {{3, 4}, {0, 3, 1}, true},
      {{4, 3}, {2, 0, 2, 1}, true, 2},      // ignore_index inside [0, C)
      {{4, 3}, {-1, 0, 2, -1}, false, -1},  // negative ignore_index
      {{4, 3}, {1, -100, 0, 2}, true, -100, DataType::Int32},
      {{2, 3, 2, 2}, {0, 1, 2, 2, 1, 0, -5, 1}, true, -5},  // [N, C, d1, d2]
      {{2, 3, 3}, {2, 1, 0, 0, 0, 1}},
  };
}

GradCase make_case(const std::string& op, const LossCase& lc, const std::string& reduction,
                   int outputs, std::vector<int> loss_outputs) {
  GradCase gc{
      .op = op,
      .inputs = {P("x", lc.scores), C("t", label_shape(lc.scores), lc.labels, lc.label_dtype)},
      .outputs = outputs,
      .loss_outputs = std::move(loss_outputs)};
  if (lc.weights) {
    std::vector<double> w;
    for (int64_t c = 0; c < lc.scores[1]; ++c) w.push_back(0.5 + 0.3 * static_cast<double>(c));
    gc.inputs.push_back(C("w", {lc.scores[1]}, w, DataType::Double));
  }
  gc.attrs.push_back(attr_string("reduction", reduction));
  if (lc.ignore) gc.attrs.push_back(attr_int("ignore_index", *lc.ignore));
  return gc;
}

}  // namespace

TEST(GradLoss, SoftmaxCrossEntropyLoss) {
  for (const auto& lc : loss_cases())
    for (const char* red : {"mean", "sum", "none"}) {
      SCOPED_TRACE(fmt::format("scores {} weights {} ignore {} reduction {}", shape_str(lc.scores),
                               lc.weights, lc.ignore ? std::to_string(*lc.ignore) : "-", red));
      check_gradient(make_case("SoftmaxCrossEntropyLoss", lc, red, 1, {}));
    }
}

// The log_prob output in the projection too: its gradient adds to the loss's.
TEST(GradLoss, SoftmaxCrossEntropyLossWithLogProb) {
  for (const auto& lc : loss_cases())
    for (const char* red : {"mean", "none"}) {
      SCOPED_TRACE(fmt::format("scores {} reduction {}", shape_str(lc.scores), red));
      check_gradient(make_case("SoftmaxCrossEntropyLoss", lc, red, 2, {0, 1}));
      check_gradient(make_case("SoftmaxCrossEntropyLoss", lc, red, 2, {1}));
    }
}

TEST(GradLoss, NegativeLogLikelihoodLoss) {
  for (const auto& lc : loss_cases())
    for (const char* red : {"mean", "sum", "none"}) {
      SCOPED_TRACE(
          fmt::format("scores {} weights {} reduction {}", shape_str(lc.scores), lc.weights, red));
      check_gradient(make_case("NegativeLogLikelihoodLoss", lc, red, 1, {}));
    }
}

// Class weights are not trained: their input carries no gradient even when they are a parameter.
TEST(GradLoss, ClassWeightsGetNoGradient) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("sce");
  Graph& g = *m->graph;
  g.add_initializer("x", Tensor::from_vector<double>({2, 3}, {0.1, 0.5, -0.3, 1.0, -1.0, 0.2}));
  g.add_initializer("t", Tensor::from_vector<int64_t>({2}, {2, 0}));
  g.add_initializer("w", Tensor::from_vector<double>({3}, {1.0, 2.0, 0.5}));
  Value* L = g.get_or_add_value("L");
  Node* n = g.add_node("SoftmaxCrossEntropyLoss",
                       {g.find_value("x"), g.find_value("t"), g.find_value("w")}, {L}, "", "sce");
  n->attrs["reduction"] = attr_string("reduction", "sum");
  g.outputs = {L};
  auto tg = autodiff::build_training_graph(*m, {.kind = "output", .output = "L"}, {"x", "w"});
  SessionOptions so;
  so.opt_level = OptLevel::None;
  auto out = Session(std::move(tg.model), so).run({});
  for (double v : out.at(tg.grads[1]).to_double_vector()) EXPECT_EQ(v, 0.0);
  // By default only x is trainable.
  auto tg2 = autodiff::build_training_graph(*m, {.kind = "output", .output = "L"}, {});
  EXPECT_EQ(tg2.params, std::vector<std::string>{"x"});
}

TEST(GradLoss, BadReductionIsAnError) {
  GradCase gc = make_case("SoftmaxCrossEntropyLoss", loss_cases()[0], "average", 1, {});
  EXPECT_THROW(check_gradient(gc), Error);
}

TEST(GradLoss, TrainingGraphSavesAndReloads) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("sce");
  Graph& g = *m->graph;
  g.add_initializer("x", Tensor::from_vector<double>({2, 3, 2}, {0.1, 0.5, -0.3, 1.0, -1.0, 0.2,
                                                                 0.7, -0.4, 0.3, 0.9, -0.8, 0.05}));
  g.add_initializer("t", Tensor::from_vector<int64_t>({2, 2}, {2, -1, 0, 1}));
  g.add_initializer("w", Tensor::from_vector<double>({3}, {1.0, 2.0, 0.5}));
  Value* L = g.get_or_add_value("L");
  Value* lp = g.get_or_add_value("lp");
  Node* n =
      g.add_node("SoftmaxCrossEntropyLoss",
                 {g.find_value("x"), g.find_value("t"), g.find_value("w")}, {L, lp}, "", "sce");
  n->attrs["ignore_index"] = attr_int("ignore_index", -1);
  Value* L2 = g.get_or_add_value("L2");
  g.add_node("NegativeLogLikelihoodLoss", {lp, g.find_value("t")}, {L2}, "", "nll")
      ->attrs["ignore_index"] = attr_int("ignore_index", -1);
  Value* total = g.get_or_add_value("total");
  g.add_node("Add", {L, L2}, {total}, "", "total");
  g.outputs = {total};
  expect_same_after_save_reload(*m, {.kind = "output", .output = "total"}, {"x"});
}

}  // namespace onyx::test
