// The training-graph builder itself: pruning, summed fan-out, dynamic broadcasting, the
// forward/backward split for callers that own the loss, and bad input.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "grad_check.h"
#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx::test {

namespace {

Tensor rand_f(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector<float>(s, v);
}

/// x[N, 4] -> MatMul w1 -> Relu -> MatMul w2 -> y[N, 3]
std::unique_ptr<Model> two_layer(bool symbolic) {
  ModelBuilder b(17);
  if (symbolic) b.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(4)});
  else b.input("x", DataType::Float, Shape{2, 4});
  b.initializer("w1", rand_f({4, 5}, 1));
  b.initializer("w2", rand_f({5, 3}, 2));
  b.node("MatMul", {"x", "w1"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("MatMul", {"r", "w2"}, {"y"});
  b.output("y");
  return b.build();
}

bool has_value_named(const Model& m, const std::string& prefix) {
  for (const auto& [name, v] : m.graph->values())
    if (name.rfind(prefix, 0) == 0 && v->producer) return true;
  return false;
}

}  // namespace

TEST(TrainingGraph, FrozenParametersGetNoBackwardNodes) {
  autodiff::LossSpec spec;
  spec.kind = "mse";
  auto all = autodiff::build_training_graph(*two_layer(false), spec, {});
  auto only_w2 = autodiff::build_training_graph(*two_layer(false), spec, {"w2"});
  EXPECT_EQ(all.params, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(only_w2.grads, (std::vector<std::string>{"w2_grad"}));
  EXPECT_FALSE(has_value_named(*only_w2.model, "w1_grad"));
  // Only w2's gradient: nothing flows through the first MatMul or the Relu.
  EXPECT_LT(only_w2.model->graph->num_nodes(), all.model->graph->num_nodes());
  bool relu_backward = false;
  for (const auto& n : only_w2.model->graph->nodes())
    relu_backward = relu_backward || n->name.rfind("Relu_1_grad", 0) == 0;
  EXPECT_FALSE(relu_backward);
}

// Exporters store constants (an attention scale, a -inf mask fill) as 0-d float
// initializers: the default trainable set leaves them out; naming one still trains it.
TEST(TrainingGraph, ScalarInitializersAreNotTrainedByDefault) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 4});
  b.initializer("w", rand_f({4, 3}, 1));
  b.initializer("scale", Tensor::scalar<float>(0.125f));
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Mul", {"h", "scale"}, {"y"});
  b.output("y");
  auto m = b.build();
  autodiff::LossSpec spec;
  spec.kind = "mse";
  EXPECT_EQ(autodiff::build_training_graph(*m, spec, {}).params, std::vector<std::string>{"w"});
  EXPECT_EQ(autodiff::build_training_graph(*m, spec, {"scale", "w"}).params,
            (std::vector<std::string>{"scale", "w"}));
}

TEST(TrainingGraph, ValueUsedSeveralTimesSumsItsGradients) {
  // L = sum(R * (x*x + x + exp(x))): x feeds three consumers.
  check_gradient({.op = "fanout",
                  .inputs = {P("x", {2, 3})},
                  .build = [](Graph& g) {
                    Value* x = g.find_value("x");
                    Value* sq = g.get_or_add_value("sq");
                    g.add_node("Mul", {x, x}, {sq}, "", "sq");
                    Value* e = g.get_or_add_value("e");
                    g.add_node("Exp", {x}, {e}, "", "e");
                    Value* s = g.get_or_add_value("s");
                    g.add_node("Sum", {sq, x, e}, {s}, "", "s");
                    return std::vector<Value*>{s};
                  }});
}

TEST(TrainingGraph, DynamicShapesUndoBroadcastingAtRunTime) {
  // Shapes unknown to the graph: sum_to must decide at run time.
  ModelBuilder b(17);
  b.input("a", DataType::Double, SymShape{Dim::symbol("A"), Dim::symbol("B")});
  b.input("c", DataType::Double, SymShape{Dim::symbol("C")});
  b.node("Mul", {"a", "c"}, {"y"});
  b.output("y");
  auto bg = autodiff::build_backward_graphs(*b.build(), {"a", "c"});
  Session fwd(std::move(bg.forward)), bwd(std::move(bg.backward));
  Tensor a = T_<double>({2, 3}, {1, 2, 3, 4, 5, 6}), c = T_<double>({3}, {1, -1, 2});
  auto f = fwd.run({{"a", a}, {"c", c}});
  NamedTensors feeds = {{"y_grad", T_<double>({2, 3}, {1, 1, 1, 2, 2, 2})}};
  for (const auto& s : bg.saved) feeds[s] = f.count(s) ? f.at(s) : (s == "a" ? a : c);
  for (const auto& w : bwd.inputs())
    if (!feeds.count(w.name)) feeds[w.name] = w.name == "a" ? a : c;
  auto g = bwd.run(feeds);
  expect_near(g.at("a_grad"), {1, -1, 2, 2, -2, 4});
  expect_near(g.at("c_grad"), {1 + 8, 2 + 10, 3 + 12});
}

TEST(TrainingGraph, ForwardBackwardSplitKeepsOnlyNeededActivations) {
  auto bg = autodiff::build_backward_graphs(*two_layer(true), {"w1", "w2"});
  EXPECT_EQ(bg.seeds, (std::vector<std::string>{"y_grad"}));
  EXPECT_EQ(bg.grads, (std::vector<std::string>{"w1_grad", "w2_grad"}));
  // dW2 needs r; dW1 needs x and the Relu's output (its mask) — never h or y.
  EXPECT_EQ(std::count(bg.saved.begin(), bg.saved.end(), "h"), 0);
  EXPECT_EQ(std::count(bg.saved.begin(), bg.saved.end(), "y"), 0);
  EXPECT_EQ(std::count(bg.saved.begin(), bg.saved.end(), "x"), 1);
  // The split agrees with the one-graph training path on L = sum(y * seed).
  Tensor x = rand_f({3, 4}, 5), seed = rand_f({3, 3}, 6);
  Session fwd(std::move(bg.forward)), bwd(std::move(bg.backward));
  auto f = fwd.run({{"x", x}});
  NamedTensors feeds = {{"y_grad", seed}};
  for (const auto& s : bg.saved) feeds[s] = s == "x" ? x : f.at(s);
  auto m = two_layer(true);
  feeds["w1"] = m->graph->initializers.at("w1");
  feeds["w2"] = m->graph->initializers.at("w2");
  NamedTensors bf;
  for (const auto& in : bwd.inputs()) bf[in.name] = feeds.at(in.name);
  auto g = bwd.run(bf);
  // Reference: y = relu(x w1) w2; dW2 = r^T seed; dW1 = x^T ((seed w2^T) * (h > 0)).
  const Tensor& w1 = feeds["w1"];
  const Tensor& w2 = feeds["w2"];
  std::vector<double> h(15), r(15), dr(15);
  for (int n = 0; n < 3; ++n)
    for (int j = 0; j < 5; ++j) {
      for (int i = 0; i < 4; ++i) h[n * 5 + j] += double(x.data<float>()[n * 4 + i]) * w1.data<float>()[i * 5 + j];
      r[n * 5 + j] = std::max(0.0, h[n * 5 + j]);
      for (int k = 0; k < 3; ++k) dr[n * 5 + j] += double(seed.data<float>()[n * 3 + k]) * w2.data<float>()[j * 3 + k];
    }
  std::vector<double> dw2(15), dw1(20);
  for (int j = 0; j < 5; ++j)
    for (int k = 0; k < 3; ++k)
      for (int n = 0; n < 3; ++n) dw2[j * 3 + k] += r[n * 5 + j] * seed.data<float>()[n * 3 + k];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      for (int n = 0; n < 3; ++n)
        dw1[i * 5 + j] += double(x.data<float>()[n * 4 + i]) * (h[n * 5 + j] > 0 ? dr[n * 5 + j] : 0.0);
  expect_near(g.at("w2_grad"), dw2, 1e-5);
  expect_near(g.at("w1_grad"), dw1, 1e-5);
}

TEST(TrainingGraph, SavedTrainingGraphReloadsAndRunsTheSame) {
  autodiff::LossSpec spec;
  spec.kind = "mse";
  auto tg = autodiff::build_training_graph(*two_layer(true), spec, {});
  std::string bytes = serialize_model(*tg.model);
  auto again = load_model_from_bytes(bytes.data(), bytes.size());
  Session s1(std::move(tg.model)), s2(std::move(again));
  NamedTensors feeds = {{"x", rand_f({4, 4}, 9)}, {"labels", rand_f({4, 3}, 10)}};
  auto o1 = s1.run(feeds), o2 = s2.run(feeds);
  for (const auto& n : {"loss", "w1_grad", "w2_grad"}) expect_near(o2.at(n), values(o1.at(n)), 0);
}

TEST(TrainingGraph, BadInputIsAClearError) {
  autodiff::LossSpec spec;
  spec.kind = "mse";
  try {
    autodiff::build_training_graph(*two_layer(false), spec, {"nope"});
    ADD_FAILURE() << "an unknown parameter accepted";
  } catch (const Error& e) {
    // Names the missing one and what the model has to choose from.
    EXPECT_NE(std::string(e.what()).find("no parameter named 'nope'; its floating-point initializers "
                                         "are: w1, w2."), std::string::npos) << e.what();
  }
  EXPECT_THROW(autodiff::build_training_graph(*two_layer(false), spec, {"x"}), Error);  // not an initializer
  EXPECT_THROW(autodiff::build_backward_graphs(*two_layer(false), {"nope"}), Error);
  // Opsets 7-12 are upgraded (test_opset_upgrade.cpp); below 7 there is nothing to upgrade.
  ModelBuilder old(6);
  old.input("x", DataType::Float, Shape{2, 2});
  old.initializer("w", rand_f({2, 2}, 1));
  old.node("MatMul", {"x", "w"}, {"y"});
  old.output("y");
  try {
    autodiff::build_training_graph(*old.build(), spec, {});
    ADD_FAILURE() << "opset 6 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opset 6"), std::string::npos) << e.what();
  }
}

TEST(TrainingGraph, EveryRuleHasAFiniteDifferenceCase) {
  // Each op type in the rule table (or trained through a rewrite) is named ("Op") in some
  // test_grad_*.cpp, where its FD checks live: a rule added without a test fails here.
  std::string all;
  for (const auto& e : std::filesystem::directory_iterator(ONYX_AUTODIFF_TEST_DIR)) {
    std::string name = e.path().filename().string();
    if (name.rfind("test_grad_", 0) != 0 || e.path().extension() != ".cpp") continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    all += ss.str();
  }
  ASSERT_FALSE(all.empty()) << "no test_grad_*.cpp under " << ONYX_AUTODIFF_TEST_DIR;
  for (const std::string& op : autodiff::gradient_rules().op_types())
    EXPECT_NE(all.find("\"" + op + "\""), std::string::npos) << op << " has a rule but no test";
  for (const auto& [domain, op] : autodiff::rewritten_op_types())
    EXPECT_NE(all.find("\"" + op + "\""), std::string::npos) << op << " trains but has no test";
}

}  // namespace onyx::test
