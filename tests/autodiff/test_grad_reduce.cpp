// Finite-difference checks of the reduction gradient rules (float64).
#include <random>

#include "autodiff/training_graph.h"
#include "grad_check.h"
#include "graph/error.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using test::attr_int;
using test::attr_ints;
using autodiff::Attrs;

/// One reduction setting: axes (empty = all), keepdims, noop_with_empty_axes.
struct ReduceSetting {
  std::vector<int64_t> axes;
  int64_t keepdims;
  int64_t noop = 0;
};

const std::vector<ReduceSetting>& reduce_settings() {
  static const std::vector<ReduceSetting> s = {
      {{}, 1},   {{}, 0},     {{1}, 1},     {{1}, 0},   {{0, 2}, 1},
      {{-1}, 0}, {{2, 0}, 0}, {{-3, 1}, 1}, {{}, 1, 1}, {{0, 1, 2}, 0}};
  return s;
}

/// Runs `op` on x with `s`, as an axes attribute (opset 17) and as an axes input (opset 18).
/// ReduceSum takes axes as an input from opset 13, so it only has the input form.
void check_reduce(const std::string& op, const GradInput& x, const ReduceSetting& s) {
  SCOPED_TRACE(fmt::format("{} axes=[{}] keepdims={} noop={}", op, fmt::join(s.axes, ","),
                           s.keepdims, s.noop));
  Attrs common = {attr_int("keepdims", s.keepdims)};
  if (s.noop) common.push_back(attr_int("noop_with_empty_axes", s.noop));
  if (op != "ReduceSum" && !s.noop) {
    Attrs a = common;
    if (!s.axes.empty()) a.push_back(attr_ints("axes", s.axes));
    check_gradient({.op = op, .inputs = {x}, .attrs = a, .opset = 17});
  }
  std::vector<double> av(s.axes.begin(), s.axes.end());
  std::vector<GradInput> ins = {x};
  if (!s.axes.empty()) ins.push_back(C("axes", {static_cast<int64_t>(av.size())}, av));
  check_gradient({.op = op, .inputs = ins, .attrs = common, .opset = 18});
}

}  // namespace

TEST(GradReduce, ReduceSumMeanEveryAxisSetting) {
  auto x = P("x", {2, 3, 4});
  for (const char* op : {"ReduceSum", "ReduceMean"})
    for (const auto& s : reduce_settings()) check_reduce(op, x, s);
}

TEST(GradReduce, ReduceMaxMinEveryAxisSetting) {
  // Random values: no ties, so the gradient goes to the single extremum.
  auto x = P("x", {2, 3, 4});
  for (const char* op : {"ReduceMax", "ReduceMin"})
    for (const auto& s : reduce_settings()) check_reduce(op, x, s);
}

TEST(GradReduce, ReduceMaxMinTiesSplitEvenly) {
  // Row 0 has a two-way tie for the max (0.9) and row 1 for the min (-0.6); each tied element
  // gets half of dy, which is what central differences see at a two-way tie.
  auto x = PV("x", {2, 4}, {0.9, -0.2, 0.9, 0.1, -0.6, 0.3, 0.5, -0.6});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    check_gradient(
        {.op = op, .inputs = {x}, .attrs = {attr_ints("axes", {1}), attr_int("keepdims", 0)}});
    check_gradient({.op = op, .inputs = {x, C("axes", {1}, {-1})}, .opset = 18});
  }
}

TEST(GradReduce, ReduceL1L2SumSquareLogSumExpEveryAxisSetting) {
  // L1 has a kink at 0: values at least 0.1 away from it.
  std::vector<double> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 ? -1 : 1) * (0.1 + 0.037 * double(i));
  auto x = PV("x", {2, 3, 4}, v);
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"})
    for (const auto& s : reduce_settings()) check_reduce(op, x, s);
}

TEST(GradReduce, ReduceLogSumEveryAxisSetting) {
  auto x = P("x", {2, 3, 4}, 0.1, 1.0);  // log needs positive sums (and elements, for noop)
  for (const auto& s : reduce_settings()) check_reduce("ReduceLogSum", x, s);
}

TEST(GradReduce, ReduceProdEveryAxisSetting) {
  // Magnitudes in [0.5, 1.5], some negative: no zeros (ReduceProdWithZeros has those).
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<double> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 4 == 1 ? -1 : 1) * u(rng);
  auto x = PV("x", {2, 3, 4}, v);
  for (const auto& s : reduce_settings()) check_reduce("ReduceProd", x, s);
}

TEST(GradReduce, ReduceProdWithZeros) {
  // Row 0: one zero (its gradient is the product of the others, theirs 0); row 1: two zeros
  // (every gradient 0); row 2: none. The product is multilinear, so central differences are
  // exact at zeros too.
  auto x = PV("x", {3, 4}, {0.7, 0.0, -1.3, 0.9, 0.0, 0.8, 0.0, 1.2, 1.1, -0.6, 0.9, 1.4});
  for (int64_t keep : {0, 1}) {
    check_gradient({.op = "ReduceProd",
                    .inputs = {x},
                    .attrs = {attr_ints("axes", {1}), attr_int("keepdims", keep)}});
    check_gradient({.op = "ReduceProd",
                    .inputs = {x, C("axes", {1}, {-1})},
                    .attrs = {attr_int("keepdims", keep)},
                    .opset = 18});
    check_gradient({.op = "ReduceProd",
                    .inputs = {x, C("axes", {1}, {0})},
                    .attrs = {attr_int("keepdims", keep)},
                    .opset = 18});
  }
  // Over everything: one zero in the whole tensor, then two.
  auto one0 = PV("x", {2, 3}, {0.7, 0.0, -1.3, 0.9, 1.1, 0.8});
  auto two0 = PV("x", {2, 3}, {0.7, 0.0, -1.3, 0.9, 0.0, 0.8});
  check_gradient({.op = "ReduceProd", .inputs = {one0}, .attrs = {attr_int("keepdims", 0)}});
  check_gradient({.op = "ReduceProd", .inputs = {two0}, .attrs = {attr_int("keepdims", 0)}});
}

TEST(GradReduce, ReduceMeanOfUnknownShapeUsesRunTimeCount) {
  // x goes through a Reshape whose shape is computed, so its rank and dims are unknown to the
  // rule: a mean over all axes divides by Size(x) / Size(y) at run time.
  for (int64_t keep : {0, 1}) {
    check_gradient({.op = "ReduceMean",
                    .inputs = {P("x", {2, 3, 4}), C("shape", {3}, {0, -1, 2})},
                    .opset = 18,
                    .build = [keep](Graph& g) -> std::vector<Value*> {
                      Value* shape = add(g, "Identity", {g.find_value("shape")});
                      Value* r = add(g, "Reshape", {g.find_value("x"), shape});
                      return {add(g, "ReduceMean", {r}, {attr_int("keepdims", keep)})};
                    }});
  }
  // Rank known but dim 1 not (a Slice with a computed start): the count is Size(x) / Size(y).
  for (int64_t keep : {0, 1}) {
    check_gradient(
        {.op = "ReduceMean",
         .inputs = {P("x", {2, 3, 4}), C("start", {1}, {0})},
         .opset = 18,
         .build = [keep](Graph& g) -> std::vector<Value*> {
           auto ints = [&](const char* n, int64_t v) {
             return g.add_initializer(n, Tensor::from_vector<int64_t>({1}, {v}));
           };
           Value* start = add(g, "Identity", {g.find_value("start")});
           Value* r =
               add(g, "Slice", {g.find_value("x"), start, ints("end", 100), ints("axis", 1)});
           return {add(g, "ReduceMean", {r, ints("axes", 1)}, {attr_int("keepdims", keep)})};
         }});
  }
}

TEST(GradReduce, CumSumExclusiveReverseEveryAxis) {
  auto x = P("x", {3, 4});
  for (int64_t axis : {0, 1, -1})
    for (int64_t exclusive : {0, 1})
      for (int64_t reverse : {0, 1}) {
        SCOPED_TRACE(fmt::format("axis {} exclusive {} reverse {}", axis, exclusive, reverse));
        check_gradient({.op = "CumSum",
                        .inputs = {x, C("axis", {}, {double(axis)})},
                        .attrs = {attr_int("exclusive", exclusive), attr_int("reverse", reverse)}});
      }
  // int32 axis, 1-D input.
  check_gradient({.op = "CumSum", .inputs = {P("v", {5}), C("axis", {}, {0}, DataType::Int32)}});
}

TEST(GradReduce, RunTimeAxesAreAnError) {
  // ReduceMean's axes are fed at run time, so the rule cannot know which axes to restore.
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 18});
  m->graph = std::make_unique<Graph>("reduce");
  Graph& g = *m->graph;
  g.add_initializer("w", Tensor::from_vector<double>({2, 3}, {1, 2, 3, 4, 5, 6}));
  Value* axes = g.get_or_add_value("axes");
  axes->type = ValueType::tensor(DataType::Int64, SymShape{Dim::fixed(1)});
  g.inputs.push_back(axes);
  Value* y = add(g, "ReduceMean", {g.find_value("w"), axes}, {attr_int("keepdims", 0)});
  g.outputs = {add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)})};
  try {
    autodiff::build_training_graph(*m, {.kind = "output"}, {"w"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[autodiff]", 0), 0u) << what;
    EXPECT_NE(what.find("ReduceMean"), std::string::npos) << what;
    EXPECT_NE(what.find("constant axes"), std::string::npos) << what;
  }
}

TEST(GradReduce, AxesComputedFromConstantsAreKnown) {
  // The dynamo exporter (optimize=False) writes axes as Reshape(Constant([-1]), Constant([-1]));
  // data propagation evaluates it, so the gradient builds, and matches central differences.
  check_gradient({.op = "ReduceMean",
                  .inputs = {P("x", {2, 3, 4}), C("a", {1}, {-1}), C("to", {1}, {-1})},
                  .opset = 18,
                  .build = [](Graph& g) -> std::vector<Value*> {
                    Value* axes = add(g, "Reshape", {g.find_value("a"), g.find_value("to")});
                    return {add(g, "ReduceMean", {g.find_value("x"), axes},
                                {attr_int("keepdims", 1)})};
                  }});
}

TEST(GradReduce, NegativeAxesOnUnknownRankAreAnError) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 18});
  m->graph = std::make_unique<Graph>("reduce");
  Graph& g = *m->graph;
  g.add_initializer("w", Tensor::from_vector<double>({2, 3}, {1, 2, 3, 4, 5, 6}));
  // The target shape is fed at run time with no declared length: no rank to infer (shape
  // inference propagates constant shapes, so an initializer would give it away).
  Value* s0 = g.get_or_add_value("s0");
  s0->type = ValueType::tensor(DataType::Int64);
  g.inputs.push_back(s0);
  g.add_initializer("axes", Tensor::from_vector<int64_t>({1}, {-1}));
  Value* shape = add(g, "Identity", {s0});
  Value* r = add(g, "Reshape", {g.find_value("w"), shape});
  Value* y = add(g, "ReduceMax", {r, g.find_value("axes")}, {attr_int("keepdims", 0)});
  g.outputs = {add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)})};
  try {
    autodiff::build_training_graph(*m, {.kind = "output"}, {"w"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("[autodiff] ReduceMax", 0), 0u) << what;
    EXPECT_NE(what.find("negative axes"), std::string::npos) << what;
  }
}

namespace {

/// x -> CumSum(axis 1, reverse) -> ReduceMax(axis 0, keep) * ReduceMean(x, axis 1) -> sum
std::vector<Value*> reduce_graph(Graph& g) {
  Value* x = g.find_value("x");
  Value* one = g.add_initializer("axis1", Tensor::from_vector<int64_t>({1}, {1}));
  Value* cs = add(g, "CumSum", {x, g.add_initializer("ax", Tensor::scalar<int64_t>(1))},
                  {attr_int("reverse", 1)});
  Value* mx = add(g, "ReduceMax", {cs}, {attr_ints("axes", {0}), attr_int("keepdims", 1)});
  Value* mn = add(g, "ReduceMean", {x}, {attr_ints("axes", {1}), attr_int("keepdims", 1)});
  Value* s = add(g, "ReduceSum", {x, one}, {attr_int("keepdims", 1)});
  return {add(g, "Add", {add(g, "Mul", {mx, mn}), s})};
}

}  // namespace

TEST(GradReduce, MultiOpGraphSurvivesSaveReload) {
  auto x = P("x", {3, 4});
  check_gradient({.op = "graph", .inputs = {x}, .build = reduce_graph});
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("reduce");
  Graph& g = *m->graph;
  g.add_initializer("x", Tensor::from_vector<double>({3, 4}, {0.3, -0.8, 0.5, 0.1, -0.4, 0.9, -0.1,
                                                              0.7, 0.2, -0.6, 0.05, -0.3}));
  Value* y = reduce_graph(g)[0];
  Value* L = add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, {"x"});
}

}  // namespace onyx::test
