// The softmax cross-entropy gradient's fusion (inference/fusions_loss_grad.cpp) and the ai.onyx
// SoftmaxCrossEntropyGrad kernel (kernels/cpu/softmax_cross_entropy_grad.cpp): the loss rule's
// Mul(Sub(Exp(log_prob), onehot(labels)), coef) in a training graph becomes one kernel with the
// same bits, for [N, C] and [N, C, d] scores, mean and sum, ignored targets (labels outside
// [0, C) included), class weights, class axis last, 1 and 2 threads; with log_prob read by the
// gradient alone, the loss joins it (ai.onyx SoftmaxCrossEntropyLossGrad, the same bits again);
// a symbolic class count is left alone; bad operands are onyx::Errors.
#include <gtest/gtest.h>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

struct Case {
  Shape x;                  // the scores' shape, classes at `class_axis`
  int64_t class_axis = 1;
  std::string reduction = "mean";
  std::optional<int64_t> ignore_index;
  bool weighted = false;
};

/// scores = x * s (s, the parameter, broadcast per class) with the softmax cross-entropy loss.
autodiff::TrainingGraph loss_graph(const Case& c, bool symbolic_classes = false) {
  ModelBuilder b(17);
  SymShape xs;
  for (size_t i = 0; i < c.x.size(); ++i) {
    const bool classes = static_cast<int64_t>(i) == (c.class_axis < 0 ? int64_t(c.x.size()) - 1 : c.class_axis);
    xs.push_back(classes && symbolic_classes ? Dim::symbol("classes") : Dim::fixed(c.x[i]));
  }
  b.input("x", DataType::Float, xs);
  Shape ss(c.x.size(), 1);  // one scale per class (one for all when the class count is symbolic)
  if (!symbolic_classes)
    ss[c.class_axis < 0 ? c.x.size() - 1 : static_cast<size_t>(c.class_axis)] =
        c.x[c.class_axis < 0 ? c.x.size() - 1 : static_cast<size_t>(c.class_axis)];
  b.initializer("s", randn(ss, 31, 0.5));
  const int64_t C = c.x[c.class_axis < 0 ? c.x.size() - 1 : static_cast<size_t>(c.class_axis)];
  if (c.weighted) b.initializer("class_w", randn({C}, 32, 0.3));
  b.node("Mul", {"x", "s"}, {"scores"});
  b.output("scores");
  auto m = b.build();
  infer_types_and_shapes(*m);
  autodiff::LossSpec spec{.kind = "softmax_cross_entropy", .reduction = c.reduction,
                          .class_axis = c.class_axis, .ignore_index = c.ignore_index};
  if (c.weighted) spec.weight = "class_w";
  return autodiff::build_training_graph(*m, spec, {"s"});
}

/// Labels for `c`: random classes, a few set to the ignore index and (with one) out of range.
Tensor labels_for(const Case& c) {
  Shape ls = c.x;
  const size_t axis = c.class_axis < 0 ? c.x.size() - 1 : static_cast<size_t>(c.class_axis);
  const int64_t C = c.x[axis];
  ls.erase(ls.begin() + static_cast<int64_t>(axis));
  std::vector<int64_t> v(static_cast<size_t>(shape_numel(ls)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % C);
  if (c.ignore_index) {
    v[1] = *c.ignore_index;
    if (v.size() > 4) v[4] = *c.ignore_index;
  }
  return Tensor::from_vector<int64_t>(ls, v);
}

}  // namespace

TEST(SoftmaxCrossEntropyGradFusion, LossGradientBecomesOneKernelWithTheSameBits) {
  const Case cases[] = {
      {{6, 11}},
      {{4, 9, 5}},
      {{4, 9, 5}, 1, "sum"},
      {{6, 11}, 1, "mean", -100},
      {{4, 9, 5}, 1, "mean", 2},
      {{6, 11}, 1, "mean", std::nullopt, true},
      {{3, 5, 13}, -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("x {} axis {} {} ignore {} weighted {}", shape_str(c.x), c.class_axis,
                             c.reduction, c.ignore_index ? std::to_string(*c.ignore_index) : "-",
                             c.weighted));
    const autodiff::TrainingGraph tg = loss_graph(c);
    const Session unfused = session_of(*tg.model, OptLevel::None);
    EXPECT_EQ(op_counts(unfused)[":Exp"], 1);
    const NamedTensors feeds{{"x", randn(c.x, 33, 2.0)}, {"labels", labels_for(c)}};
    for (int threads : {1, 2}) {
      const Session fused = session_of(*tg.model, OptLevel::All, threads);
      auto ops = op_counts(fused);
      // The loss and its gradient as one node: log_prob is read by the gradient alone.
      EXPECT_EQ(ops["ai.onyx:SoftmaxCrossEntropyLossGrad"], 1);
      EXPECT_EQ(ops["ai.onyx:SoftmaxCrossEntropyGrad"], 0);
      EXPECT_EQ(ops[":SoftmaxCrossEntropyLoss"], 0);
      EXPECT_EQ(ops[":Exp"], 0);
      const NamedTensors a = fused.run(feeds), b = unfused.run(feeds);
      for (const std::string& name : {tg.loss, tg.grads[0]})
        expect_same_bits(a.at(name), b.at(name), name + " threads " + std::to_string(threads));
    }
  }
}

// Where something else reads log_prob (here: it is a graph output too) the loss keeps writing
// it and the gradient stays the ai.onyx SoftmaxCrossEntropyGrad of the first fusion, same bits.
TEST(SoftmaxCrossEntropyGradFusion, LogProbReadElsewhereKeepsTheLossApart) {
  const Case c{{4, 9, 5}, 1, "mean", 2};
  const autodiff::TrainingGraph tg = loss_graph(c);
  Graph& g = *tg.model->graph;
  std::string log_prob;
  for (const auto& n : g.nodes())
    if (n->op_type == "SoftmaxCrossEntropyLoss") {
      ASSERT_GE(n->outputs.size(), 2u);
      log_prob = n->outputs[1]->name;
      g.outputs.push_back(n->outputs[1]);
    }
  ASSERT_FALSE(log_prob.empty());
  const Session unfused = session_of(*tg.model, OptLevel::None);
  const Session fused = session_of(*tg.model, OptLevel::All, 2);
  auto ops = op_counts(fused);
  EXPECT_EQ(ops["ai.onyx:SoftmaxCrossEntropyLossGrad"], 0);
  EXPECT_EQ(ops["ai.onyx:SoftmaxCrossEntropyGrad"], 1);
  EXPECT_EQ(ops[":SoftmaxCrossEntropyLoss"], 1);
  const NamedTensors feeds{{"x", randn(c.x, 33, 2.0)}, {"labels", labels_for(c)}};
  const NamedTensors a = fused.run(feeds), b = unfused.run(feeds);
  for (const std::string& name : {tg.loss, tg.grads[0], log_prob})
    expect_same_bits(a.at(name), b.at(name), name);
}

// The fused kernel against the two it replaces, run as separate nodes (no optimizer): float and
// double, classes at axis 1 of [N, C, d] and of [N, C], reduction none / sum / mean, class
// weights, an ignored target, a scalar and a per-position coef.
TEST(SoftmaxCrossEntropyGradFusion, FusedKernelHasTheBitsOfLossAndGradApart) {
  struct K {
    Shape x;
    DataType dt;
    std::string reduction;
    bool weighted, per_position;
  };
  const K cases[] = {{{5, 7, 3}, DataType::Float, "none", false, true},
                     {{5, 7, 3}, DataType::Double, "mean", true, false},
                     {{6, 300}, DataType::Float, "mean", true, false},
                     {{6, 300}, DataType::Double, "sum", false, true},
                     {{3, 1100}, DataType::Float, "sum", false, false}};
  for (const K& k : cases) {
    SCOPED_TRACE(fmt::format("x {} {} {}", shape_str(k.x), dtype_name(k.dt), k.reduction));
    Shape ls = k.x;
    ls.erase(ls.begin() + 1);
    Shape cs = k.x;
    cs[1] = 1;
    if (!k.per_position) cs = {};
    std::vector<int64_t> lv(static_cast<size_t>(shape_numel(ls)));
    for (size_t i = 0; i < lv.size(); ++i) lv[i] = static_cast<int64_t>((i * 5 + 1) % k.x[1]);
    lv[2] = -1;  // ignored by the loss, no class in the gradient
    const NamedTensors feeds{{"x", randn(k.x, 41, 3.0, k.dt)},
                             {"l", Tensor::from_vector<int64_t>(ls, lv)},
                             {"k", randn(cs, 42, 0.5, k.dt)},
                             {"w", randn({k.x[1]}, 43, 0.4, k.dt)}};
    const std::vector<Attribute> attrs{Attribute::of_string("reduction", k.reduction),
                                       Attribute::of_int("ignore_index", -1)};
    auto build = [&](bool fused) {
      ModelBuilder b(17, "ai.onyx");
      b.input("x", k.dt, k.x).input("l", DataType::Int64, ls).input("k", k.dt, cs);
      b.input("w", k.dt, Shape{k.x[1]});
      std::vector<std::string> loss_in{"x", "l"};
      if (k.weighted) loss_in.push_back("w");
      if (fused) {
        std::vector<std::string> in{"x", "l", "l", "k"};
        if (k.weighted) in.push_back("w");
        set_attrs(b.node("SoftmaxCrossEntropyLossGrad", in, {"loss", "dx"}, "ai.onyx"), attrs);
      } else {
        set_attrs(b.node("SoftmaxCrossEntropyLoss", loss_in, {"loss", "lp"}), attrs);
        b.node("SoftmaxCrossEntropyGrad", {"lp", "l", "k"}, {"dx"}, "ai.onyx");
      }
      b.output("loss").output("dx");
      SessionOptions so;
      so.opt_level = OptLevel::None;
      so.intra_op_threads = 2;
      return b.session(so);
    };
    const NamedTensors a = build(true).run(feeds), b = build(false).run(feeds);
    expect_same_bits(a.at("loss"), b.at("loss"), "loss");
    expect_same_bits(a.at("dx"), b.at("dx"), "dx");
  }
}

TEST(SoftmaxCrossEntropyGradFusion, SymbolicClassCountIsLeftAlone) {
  const autodiff::TrainingGraph tg = loss_graph({{6, 11}}, /*symbolic_classes=*/true);
  EXPECT_EQ(op_counts(Session(clone_model(*tg.model)))["ai.onyx:SoftmaxCrossEntropyGrad"], 0);
}

TEST(SoftmaxCrossEntropyGradFusion, KernelRefusesMismatchedOperands) {
  auto run = [](const Shape& lp, const Shape& labels, const Shape& coef) {
    ModelBuilder b(17, "ai.onyx");
    b.input("lp", DataType::Float, lp).input("l", DataType::Int64, labels);
    b.input("k", DataType::Float, coef);
    b.node("SoftmaxCrossEntropyGrad", {"lp", "l", "k"}, {"dx"}, "ai.onyx");
    b.output("dx");
    Session s = b.session();
    std::vector<int64_t> lv(static_cast<size_t>(shape_numel(labels)), 1);
    return s.run({{"lp", randn(lp, 1)}, {"l", Tensor::from_vector<int64_t>(labels, lv)},
                  {"k", randn(coef, 2)}});
  };
  EXPECT_EQ(run({2, 3, 4}, {2, 4}, {2, 1, 4}).at("dx").shape(), (Shape{2, 3, 4}));
  expect_error([&] { run({2, 3, 4}, {2, 3}, {}); }, "labels must be int64 [2, 4]");
  expect_error([&] { run({2, 3, 4}, {2, 4}, {2, 3, 4}); }, "coef must be one float value or float [2, 1, 4]");
  // The session stays usable after the errors.
  EXPECT_EQ(run({2, 3}, {2}, {}).at("dx").shape(), (Shape{2, 3}));
}

TEST(SoftmaxCrossEntropyGradFusion, FusedKernelRefusesMismatchedOperands) {
  auto run = [](const Shape& x, DataType label_dt, const Shape& labels, const Shape& grad_labels,
                const Shape& coef, int64_t label_value = 1) {
    ModelBuilder b(17, "ai.onyx");
    b.input("x", DataType::Float, x).input("l", label_dt, labels);
    b.input("gl", DataType::Int64, grad_labels).input("k", DataType::Float, coef);
    b.node("SoftmaxCrossEntropyLossGrad", {"x", "l", "gl", "k"}, {"loss", "dx"}, "ai.onyx");
    b.output("loss").output("dx");
    Session s = b.session();
    auto ints = [&](const Shape& sh, DataType dt) {
      const size_t n = static_cast<size_t>(shape_numel(sh));
      return dt == DataType::Int64
                 ? Tensor::from_vector<int64_t>(sh, std::vector<int64_t>(n, label_value))
                 : Tensor::from_vector<int32_t>(sh, std::vector<int32_t>(n, int32_t(label_value)));
    };
    return s.run({{"x", randn(x, 1)}, {"l", ints(labels, label_dt)},
                  {"gl", ints(grad_labels, DataType::Int64)}, {"k", randn(coef, 2)}});
  };
  const NamedTensors ok = run({2, 3, 4}, DataType::Int32, {2, 4}, {2, 4}, {2, 1, 4});
  EXPECT_EQ(ok.at("dx").shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(ok.at("loss").shape(), (Shape{}));
  expect_error([&] { run({2, 3, 4}, DataType::Int64, {2, 3}, {2, 4}, {}); },
               "target should have shape [2, 4] but has [2, 3]");
  expect_error([&] { run({2, 3, 4}, DataType::Int64, {2, 4}, {2, 3}, {}); },
               "grad_labels must be int64 [2, 4]");
  expect_error([&] { run({2, 3, 4}, DataType::Int64, {2, 4}, {2, 4}, {2, 3, 4}); },
               "coef must be one float value or float [2, 1, 4]");
  expect_error([&] { run({2, 3}, DataType::Int64, {2}, {2}, {}, 7); },
               "target value 7 is outside [0, 3)");
  // The session stays usable after the errors.
  EXPECT_EQ(run({2, 3}, DataType::Int64, {2}, {2}, {}).at("dx").shape(), (Shape{2, 3}));
}

}  // namespace onyx::test
