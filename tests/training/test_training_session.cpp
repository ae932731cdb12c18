// TrainingSession: closed-form updates, learning, determinism, export, bad input.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "kernels/denormals.h"
#include "training/checkpoint.h"
#include "training/training_session.h"
#include "training_models.h"

namespace onyx::test {

namespace {

TrainingConfig sgd_mse(double lr) {
  TrainingConfig c;
  c.loss.kind = "mse";
  c.optimizer.name = "sgd";
  c.optimizer.lr = lr;
  c.threads = 1;
  return c;
}

std::vector<float> copy_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

}  // namespace

TEST(TrainingSession, OneSgdStepMatchesClosedFormLinearMse) {
  const int64_t N = 5, I = 4, O = 3;
  TrainingSession ts(linear_model(I, O), sgd_mse(0.1));
  std::mt19937 rng(11);
  Tensor x = random_tensor({N, I}, rng, 1.0), t = random_tensor({N, O}, rng, 1.0);
  auto W = copy_of(ts.parameter("W")), b = copy_of(ts.parameter("b"));
  // Reference in double: L = mean((xW^T + b - t)^2), dW = 2/(N O) r^T x, db = 2/(N O) sum r.
  std::vector<double> r(N * O);
  double loss = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double y = b[o];
      for (int64_t i = 0; i < I; ++i) y += double(x.data<float>()[n * I + i]) * W[o * I + i];
      r[n * O + o] = y - t.data<float>()[n * O + o];
      loss += r[n * O + o] * r[n * O + o];
    }
  loss /= N * O;
  double got = ts.train_step({{"x", x}, {"labels", t}});
  EXPECT_NEAR(got, loss, 1e-5 * std::max(1.0, loss));
  auto W1 = copy_of(ts.parameter("W")), b1 = copy_of(ts.parameter("b"));
  for (int64_t o = 0; o < O; ++o) {
    double db = 0;
    for (int64_t n = 0; n < N; ++n) db += 2.0 / (N * O) * r[n * O + o];
    EXPECT_NEAR(b1[o], b[o] - 0.1 * db, 1e-5);
    for (int64_t i = 0; i < I; ++i) {
      double dw = 0;
      for (int64_t n = 0; n < N; ++n) dw += 2.0 / (N * O) * r[n * O + o] * x.data<float>()[n * I + i];
      EXPECT_NEAR(W1[o * I + i], W[o * I + i] - 0.1 * dw, 1e-5);
    }
  }
  EXPECT_EQ(ts.step(), 1);
}

TEST(TrainingSession, MlpLearnsAClassificationTask) {
  TrainingConfig c;
  c.optimizer = {.name = "adamw", .lr = 0.01, .weight_decay = 0.01};
  c.threads = 2;
  TrainingSession ts(mlp_model(8, 32, 4), c);
  auto eval = class_batch(256, 8, 4, 1000);
  double before = ts.eval_step(eval).at("loss").to_double_vector()[0];
  for (int s = 0; s < 150; ++s) ts.train_step(class_batch(32, 8, 4, static_cast<uint32_t>(s)));
  double after = ts.eval_step(eval).at("loss").to_double_vector()[0];
  EXPECT_LT(after, 0.5 * before) << "before " << before << " after " << after;
  // Accuracy of the trained model on held-out data.
  Tensor logits = ts.predict({{"x", eval.at("x")}}).at("logits");
  int correct = 0;
  for (int64_t i = 0; i < 256; ++i) {
    const float* row = logits.data<float>() + i * 4;
    int64_t arg = std::max_element(row, row + 4) - row;
    correct += arg == eval.at("labels").data<int64_t>()[i];
  }
  EXPECT_GT(correct, 256 * 0.85);
}

// Models importing ai.onnx opset 7-12 are upgraded to opset-13 meanings and train (they used
// to be refused): the same MLP imported as opset 9, with a LogSoftmax-9 head over axis 1 (the
// old flattened meaning), learns as well.
TEST(TrainingSession, Opset9ModelTrains) {
  auto m = mlp_model(8, 32, 4);
  m->opsets = {{"", 9}};
  Graph& g = *m->graph;
  Value* logp = g.get_or_add_value("logp");
  g.add_node("LogSoftmax", {g.outputs[0]}, {logp}, "", "logsoftmax9");
  g.outputs = {logp};
  TrainingConfig c;
  c.loss.kind = "nll";
  c.optimizer = {.name = "adamw", .lr = 0.01, .weight_decay = 0.01};
  c.threads = 2;
  TrainingSession ts(std::move(m), c);
  auto eval = class_batch(256, 8, 4, 1000);
  double before = ts.eval_step(eval).at("loss").to_double_vector()[0];
  for (int s = 0; s < 150; ++s) ts.train_step(class_batch(32, 8, 4, static_cast<uint32_t>(s)));
  double after = ts.eval_step(eval).at("loss").to_double_vector()[0];
  EXPECT_LT(after, 0.5 * before) << "before " << before << " after " << after;
}

// --freeze: frozen parameters are not trained (no gradient, unchanged values); a pattern
// that matches nothing, or everything, is an error.
TEST(TrainingSession, FreezeKeepsParametersUnchanged) {
  TrainingConfig c;
  c.optimizer = {.name = "sgd", .lr = 0.1};
  c.threads = 1;
  c.freeze = {"^w1$", "b1"};
  TrainingSession ts(mlp_model(8, 16, 4), c);
  EXPECT_EQ(ts.parameter_names(), (std::vector<std::string>{"b2", "w2"}));
  auto w2_before = ts.parameter("w2").clone().to_double_vector();
  for (int s = 0; s < 3; ++s) ts.train_step(class_batch(16, 8, 4, static_cast<uint32_t>(s)));
  EXPECT_NE(ts.parameter("w2").to_double_vector(), w2_before);
  auto frozen_w1 = ts.inference_model()->graph->initializers.at("w1").to_double_vector();
  EXPECT_EQ(frozen_w1, mlp_model(8, 16, 4)->graph->initializers.at("w1").to_double_vector());
  for (auto bad : {std::vector<std::string>{"nosuch"}, std::vector<std::string>{"."}, std::vector<std::string>{"("}}) {
    TrainingConfig b = c;
    b.freeze = bad;
    EXPECT_THROW(TrainingSession(mlp_model(8, 16, 4), b), Error) << bad[0];
  }
}

// Parameter groups: a group's base rate and weight decay apply to the parameters it matches
// and nothing else. One SGD step of a group with lr 0.05 equals an ungrouped step at 0.05
// for those parameters and at the base 0.1 for the rest; a decay group also decays biases.
TEST(TrainingSession, ParamGroupsSetRateAndDecayPerParameter) {
  auto one_step = [](double lr, std::vector<ParamGroup> groups, double wd = 0) {
    TrainingConfig c;
    c.optimizer = {.name = "sgd", .lr = lr, .weight_decay = wd};
    c.threads = 1;
    c.param_groups = std::move(groups);
    TrainingSession ts(mlp_model(8, 16, 4), c);
    ts.train_step(class_batch(16, 8, 4, 7));
    std::map<std::string, std::vector<double>> p;
    for (const auto& n : ts.parameter_names()) p[n] = ts.parameter(n).to_double_vector();
    return p;
  };
  auto grouped = one_step(0.1, {{.match = "^b", .lr = 0.05}});
  auto slow = one_step(0.05, {});
  auto fast = one_step(0.1, {});
  EXPECT_EQ(grouped.at("b1"), slow.at("b1"));
  EXPECT_EQ(grouped.at("b2"), slow.at("b2"));
  EXPECT_EQ(grouped.at("w1"), fast.at("w1"));
  EXPECT_EQ(grouped.at("w2"), fast.at("w2"));
  // Decay 0.5 on the biases only (1-D, which decay_1d = false would otherwise exempt).
  auto decayed = one_step(0.1, {{.match = "^b", .weight_decay = 0.5}});
  auto plain = one_step(0.1, {});
  EXPECT_NE(decayed.at("b1"), plain.at("b1"));
  EXPECT_EQ(decayed.at("w1"), plain.at("w1"));
  TrainingConfig c;
  c.param_groups = {{.match = "nosuch", .lr = 0.1}};
  EXPECT_THROW(TrainingSession(mlp_model(8, 16, 4), c), Error);
  c.param_groups = {{.match = "w1"}};
  EXPECT_THROW(TrainingSession(mlp_model(8, 16, 4), c), Error);  // sets nothing
}

TEST(TrainingSession, DeterministicForSeedAndThreads) {
  TrainingConfig c;
  c.optimizer = {.name = "adam", .lr = 0.01};
  c.seed = 42;
  c.threads = 2;
  TrainingSession a(mlp_model(8, 16, 3, true), c), b(mlp_model(8, 16, 3, true), c);
  for (int s = 0; s < 5; ++s) {
    auto batch = class_batch(16, 8, 3, static_cast<uint32_t>(s));
    EXPECT_EQ(a.train_step(batch), b.train_step(batch));
  }
  Tensor pa = a.flat_parameters(), pb = b.flat_parameters();
  EXPECT_EQ(std::memcmp(pa.raw(), pb.raw(), pa.nbytes()), 0);
}

TEST(TrainingSession, AccumulationEqualsOneBigBatch) {
  // Mean-reduced loss: two micro-batches of 8 averaged == one batch of 16 (same data).
  TrainingConfig c = sgd_mse(0.05);
  TrainingConfig acc = c;
  acc.accumulation_steps = 2;
  TrainingSession one(linear_model(4, 2), c), two(linear_model(4, 2), acc);
  std::mt19937 rng(5);
  Tensor x = random_tensor({16, 4}, rng, 1.0), t = random_tensor({16, 2}, rng, 1.0);
  one.train_step({{"x", x}, {"labels", t}});
  auto half = [&](const Tensor& v, int64_t k) {
    int64_t row = v.shape()[1];
    std::vector<float> d(v.data<float>() + k * 8 * row, v.data<float>() + (k + 1) * 8 * row);
    return Tensor::from_vector<float>({8, row}, d);
  };
  EXPECT_FALSE(two.train_step_detailed({{"x", half(x, 0)}, {"labels", half(t, 0)}}).stepped);
  EXPECT_TRUE(two.train_step_detailed({{"x", half(x, 1)}, {"labels", half(t, 1)}}).stepped);
  auto p1 = copy_of(one.flat_parameters()), p2 = copy_of(two.flat_parameters());
  for (size_t i = 0; i < p1.size(); ++i) EXPECT_NEAR(p1[i], p2[i], 1e-6);
}

// An output that is a parameter itself (an Identity of it) comes back from predict as a copy:
// a later train_step does not change it under the caller, and writing into it does not change
// the model.
TEST(TrainingSession, PredictedOutputsThatAreParametersAreCopies) {
  std::unique_ptr<Model> m = linear_model(4, 2);
  Graph& g = *m->graph;
  Value* b_out = g.get_or_add_value("b_out");
  g.add_node("Identity", {g.find_value("b")}, {b_out}, "", "b_identity");
  g.outputs.push_back(b_out);
  TrainingConfig c = sgd_mse(0.1);
  c.loss.output = "y";
  TrainingSession ts(std::move(m), c);
  std::mt19937 rng(7);
  Tensor x = random_tensor({8, 4}, rng, 1.0), t = random_tensor({8, 2}, rng, 1.0);
  Tensor before = ts.predict({{"x", x}}).at("b_out");
  const std::vector<float> b0 = copy_of(ts.parameter("b"));
  EXPECT_EQ(copy_of(before), b0);
  before.data<float>()[0] = 1000.f;
  EXPECT_EQ(copy_of(ts.parameter("b")), b0);
  ts.train_step({{"x", x}, {"labels", t}});
  EXPECT_EQ(before.data<float>()[0], 1000.f);
  EXPECT_NE(copy_of(ts.parameter("b")), b0);
  EXPECT_EQ(copy_of(ts.predict({{"x", x}}).at("b_out")), copy_of(ts.parameter("b")));
}

TEST(TrainingSession, ExportedModelRunsInSessionWithTheTrainedWeights) {
  TrainingConfig c;
  c.optimizer = {.name = "sgd", .lr = 0.1, .momentum = 0.9};
  TrainingSession ts(mlp_model(6, 8, 3), c);
  for (int s = 0; s < 3; ++s) ts.train_step(class_batch(8, 6, 3, static_cast<uint32_t>(s)));
  auto path = (std::filesystem::temp_directory_path() / "onyx_test_export.onnx").string();
  ts.export_inference_model(path);
  Session inf(path);
  auto x = class_batch(8, 6, 3, 77).at("x");
  expect_near(inf.run({{"x", x}}).at("logits"), values(ts.predict({{"x", x}}).at("logits")), 1e-6);
  std::filesystem::remove(path);
}

TEST(TrainingSession, SavedTrainingGraphRunsWithTheSameResults) {
  TrainingConfig c;
  c.optimizer = {.name = "sgd", .lr = 0.1};
  TrainingSession ts(mlp_model(6, 8, 3), c);
  auto path = (std::filesystem::temp_directory_path() / "onyx_test_train_graph.onnx").string();
  save_model(ts.training_model(), path);
  Session reloaded(path);
  auto batch = class_batch(8, 6, 3, 5);
  auto out = reloaded.run(batch);  // parameters default to their initializers
  Tensor w1_before = ts.parameter("w1").clone();
  double loss = ts.train_step(batch);
  EXPECT_NEAR(out.at("loss").to_double_vector()[0], loss, 1e-6);
  // SGD without momentum: w1_after = w1_before - lr * grad, so the saved graph's gradient matches.
  auto g = values(out.at("w1_grad"));
  auto after = values(ts.parameter("w1"));
  auto before = values(w1_before);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.1 * g[i], 1e-6);
  std::filesystem::remove(path);
}

TEST(TrainingSession, BadInputsAreClearErrors) {
  TrainingConfig c;
  c.loss.output = "nope";
  EXPECT_THROW(TrainingSession(mlp_model(4, 4, 2), c), Error);
  c = {};
  c.trainable = {"w1", "missing"};
  EXPECT_THROW(TrainingSession(mlp_model(4, 4, 2), c), Error);
  c = {};
  c.optimizer.name = "rmsprop";
  EXPECT_THROW(TrainingSession(mlp_model(4, 4, 2), c), Error);
  c = {};
  c.loss.kind = "focal";
  EXPECT_THROW(TrainingSession(mlp_model(4, 4, 2), c), Error);

  TrainingSession ts(mlp_model(4, 4, 2), TrainingConfig{});
  auto batch = class_batch(4, 4, 2, 1);
  auto bad = batch;
  bad["labels"] = T_<float>({4}, {0, 1, 0, 1});
  EXPECT_THROW(ts.train_step(bad), Error);  // labels of the wrong dtype
  bad = batch;
  bad["labels"] = T_<int64_t>({4, 1}, {0, 1, 0, 1});
  EXPECT_THROW(ts.train_step(bad), Error);  // labels of the wrong shape
  bad = batch;
  bad.erase("labels");
  EXPECT_THROW(ts.train_step(bad), Error);
  bad = batch;
  bad["w1"] = ts.parameter("w1");
  EXPECT_THROW(ts.train_step(bad), Error);  // parameters are not batch inputs
  EXPECT_THROW(ts.parameter("nope"), Error);

  // A NaN loss changes no weights.
  auto before = copy_of(ts.flat_parameters());
  bad = batch;
  Tensor x = batch.at("x").clone();
  x.data<float>()[0] = std::nanf("");
  bad["x"] = x;
  try {
    ts.train_step(bad);
    ADD_FAILURE() << "NaN loss accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no weights were changed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(copy_of(ts.flat_parameters()), before);
  EXPECT_EQ(ts.step(), 0);
  ts.train_step(batch);  // still usable
  EXPECT_EQ(ts.step(), 1);
}

// TrainingConfig::profile_path: one event per node of each training-graph run, forward and
// backward (the profile `onyx train --profile` writes); no profile is an error, not a file.
TEST(TrainingSession, ProfileCoversForwardAndBackwardOfEveryStep) {
  auto path = std::filesystem::temp_directory_path() /
              ("onyx_train_profile_" + std::to_string(::getpid()) + ".json");
  TrainingConfig c;
  c.optimizer = {.name = "adamw", .lr = 0.01};
  c.threads = 1;
  c.profile_path = path.string();
  TrainingSession ts(mlp_model(8, 16, 4), c);
  for (uint32_t s = 0; s < 3; ++s) ts.train_step(class_batch(16, 8, 4, s));
  ASSERT_EQ(ts.end_profiling(), path.string());
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  nlohmann::json trace = nlohmann::json::parse(f);
  std::map<std::string, int> runs_of;  // node name -> events
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("cat", "") == "node") ++runs_of[e.at("name").get<std::string>()];
  int forward = 0, backward = 0;
  for (const auto& [name, n] : runs_of) {
    EXPECT_EQ(n, 3) << name << " ran " << n << " times in 3 steps";
    (name.find("_grad") != std::string::npos ? backward : forward) += 1;
  }
  EXPECT_GT(forward, 2);
  EXPECT_GT(backward, 2);
  std::filesystem::remove(path);

  TrainingConfig off = c;
  off.profile_path.clear();
  TrainingSession quiet(mlp_model(8, 16, 4), off);
  try {
    quiet.end_profiling();
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profile_path is empty"), std::string::npos) << e.what();
  }
}

TEST(TrainingSession, NoGradientRuleNamesTheNode) {
  // Det has no rule (its gradient needs a matrix inverse, which ai.onnx lacks).
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{3, 3});
  b.initializer("w", T_<float>({3}, {1, 2, 3}));
  b.node("Mul", {"x", "w"}, {"m"});
  b.node("Det", {"m"}, {"r"}).name = "determinant";
  b.node("Mul", {"r", "w"}, {"y"});
  b.output("y");
  TrainingConfig c;
  c.loss.kind = "mse";
  try {
    TrainingSession ts(b.build(), c);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Det"), std::string::npos) << m;
    EXPECT_NE(m.find("determinant"), std::string::npos) << m;
  }
}

#if defined(__x86_64__) || defined(__i386__)
// TrainingConfig::flush_denormals (on by default): the training graph reads and writes
// denormals as zero, so a gradient made of denormal inputs is exactly 0; off keeps IEEE
// denormals. The process's own mode is untouched either way.
TEST(TrainingSession, DenormalsAreFlushedInTrainingStepsUnlessAskedNotTo) {
  const int64_t N = 4, I = 3, O = 2;
  const float denormal = std::numeric_limits<float>::denorm_min() * 1000.0f;  // ~1.4e-42
  Tensor x = Tensor::from_vector<float>({N, I}, std::vector<float>(N * I, denormal));
  Tensor t = Tensor::from_vector<float>({N, O}, std::vector<float>(N * O, 1.0f));
  for (bool flush : {true, false}) {
    TrainingConfig c = sgd_mse(0.0);
    c.flush_denormals = flush;
    TrainingSession ts(linear_model(I, O), c);
    ts.train_step({{"x", x}, {"labels", t}});
    // dW = 2 / (N O) r^T x: normal residuals times denormal inputs.
    const Tensor g = ts.flat_gradients();
    int subnormal = 0;
    for (int64_t i = 0; i < g.numel(); ++i)
      subnormal += std::fpclassify(g.data<float>()[i]) == FP_SUBNORMAL;
    if (flush)
      EXPECT_EQ(subnormal, 0) << "flushed: W's gradient is exactly 0";
    else
      EXPECT_EQ(subnormal, O * I) << "kept: W's gradient is denormal";
    EXPECT_FALSE(FlushDenormals::active_here());
  }
}

// The flush covers the update passes too: gradients of ~1e-19 (normal, so the graph keeps them)
// square to ~1e-38, and AdamW's second moment (1 - beta2) g^2 ~1e-41 is denormal. Flushed it is
// 0 (and every later operation on it is fast); kept it stays denormal. Either way the weights
// move alike: sqrt(v) ~3e-21 is far below eps.
TEST(TrainingSession, DenormalsAreFlushedInTheOptimizerStepUnlessAskedNotTo) {
  const int64_t N = 4, I = 3, O = 2;
  Tensor x = Tensor::from_vector<float>({N, I}, std::vector<float>(N * I, 1e-19f));
  Tensor t = Tensor::from_vector<float>({N, O}, std::vector<float>(N * O, 1.0f));
  std::map<bool, std::vector<float>> weights;
  for (bool flush : {true, false}) {
    TrainingConfig c;
    c.loss.kind = "mse";
    c.optimizer.name = "adamw";
    c.optimizer.lr = 0.01;
    c.threads = 1;
    c.flush_denormals = flush;
    TrainingSession ts(linear_model(I, O), c);
    ts.train_step({{"x", x}, {"labels", t}});
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("onyx_denormal_moments_" + std::to_string(::getpid()) + ".onyx")).string();
    ts.save_checkpoint(path);
    const training::CheckpointData d = training::read_checkpoint(path);
    std::filesystem::remove(path);
    int subnormal = 0, found = 0;
    for (const auto& [name, v] : d.tensors) {
      if (name == "optim/v") {
        ++found;
        for (int64_t i = 0; i < v.numel(); ++i)
          subnormal += std::fpclassify(v.data<float>()[i]) == FP_SUBNORMAL;
      } else if (name.rfind("param/", 0) == 0) {
        for (int64_t i = 0; i < v.numel(); ++i) weights[flush].push_back(v.data<float>()[i]);
      }
    }
    ASSERT_EQ(found, 1) << "the checkpoint has AdamW's second moment";
    if (flush)
      EXPECT_EQ(subnormal, 0) << "flushed: W's second moment is exactly 0";
    else
      EXPECT_EQ(subnormal, O * I) << "kept: W's second moment is denormal";
    EXPECT_FALSE(FlushDenormals::active_here());
  }
  EXPECT_EQ(weights[true], weights[false]);
}
#endif

}  // namespace onyx::test
