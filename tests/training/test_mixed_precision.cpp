// Mixed-precision training: the loss scaler against torch.amp.GradScaler's recorded decisions,
// bf16/fp16 TrainingSessions (float32 master weights and gradients, each weight cast once),
// skipped overflow steps, and the scaler state in checkpoints.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "optimizers/loss_scaler.h"
#include "training/training_session.h"
#include "training_models.h"

namespace onyx::test {
namespace {

// ---- The loss scaler, step by step against torch ----

/// Replays tools/gen_grad_scaler_sequence.py's cases: per step the gradient c * scale is made
/// in float32 (inf/NaN where torch's was), unscaled, and the scaler updated; the skip decision,
/// the next scale and the growth tracker must be torch's exactly.
TEST(LossScaler, ReplaysTorchGradScalerDecisions) {
  std::ifstream f(std::string(ONYX_TEST_DATA) + "/grad_scaler/sequences.json");
  ASSERT_TRUE(f) << "missing tests/data/grad_scaler/sequences.json";
  nlohmann::json data = nlohmann::json::parse(f);
  ASSERT_GE(data["cases"].size(), 4u);
  size_t steps = 0, skipped = 0, grown = 0;
  for (const auto& c : data["cases"]) {
    optim::LossScalerConfig cfg;
    cfg.init_scale = c["config"].value("init_scale", cfg.init_scale);
    cfg.growth_factor = c["config"].value("growth_factor", cfg.growth_factor);
    cfg.backoff_factor = c["config"].value("backoff_factor", cfg.backoff_factor);
    cfg.growth_interval = c["config"].value("growth_interval", cfg.growth_interval);
    optim::LossScaler scaler(cfg);
    for (const auto& s : c["steps"]) {
      const std::string kind = s[0];
      const float ran_with = s[1].get<float>(), next = s[3].get<float>();
      const bool torch_skipped = s[2].get<int>() != 0;
      const int64_t tracker = s[4];
      SCOPED_TRACE(fmt::format("case {} step {}", c["name"].get<std::string>(), steps));
      ASSERT_EQ(scaler.scale(), ran_with);
      float g[4] = {1.0f, 2.0f, 3.0f, 4.0f};
      if (kind == "i") g[1] = INFINITY;
      if (kind == "n") g[2] = NAN;
      for (float& x : g) x *= scaler.scale();  // the backward of sum(p * c) * scale
      Tensor gt = Tensor::wrap(DataType::Float, {4}, g);
      bool found_inf = scaler.unscale(gt, 1.0, 2);
      ASSERT_EQ(found_inf, torch_skipped);
      if (!found_inf) {
        for (int i = 0; i < 4; ++i) EXPECT_EQ(g[i], static_cast<float>(i + 1));
      }
      scaler.update(found_inf);
      ASSERT_EQ(scaler.scale(), next);
      ASSERT_EQ(scaler.growth_tracker(), tracker);
      ++steps, skipped += found_inf, grown += next > ran_with;
    }
  }
  // The data exercises every rule: skips, growth, growth refused at float32's maximum.
  EXPECT_GT(skipped, 20u);
  EXPECT_GT(grown, 5u);
  EXPECT_GT(steps, 4000u);
}

TEST(LossScaler, UnscaleFoldsInAveragingAndReadsEachGradientOnce) {
  optim::LossScaler scaler({.init_scale = 1024.0});
  std::vector<float> g(100000, 1024.0f * 3.0f);
  Tensor gt = Tensor::wrap(DataType::Float, {static_cast<int64_t>(g.size())}, g.data());
  EXPECT_FALSE(scaler.unscale(gt, 0.25, 2));
  for (float x : g) ASSERT_EQ(x, 0.75f);
  g[77777] = -INFINITY;
  EXPECT_TRUE(scaler.unscale(gt, 1.0, 2));
}

TEST(LossScaler, RefusesWhatTorchRefuses) {
  auto throws = [](optim::LossScalerConfig c) {
    try {
      optim::LossScaler s(c);
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(throws({.growth_factor = 1.0}).find("growth_factor should be > 1"), std::string::npos);
  EXPECT_NE(throws({.backoff_factor = 1.5}).find("backoff_factor should be in (0, 1)"), std::string::npos);
  EXPECT_NE(throws({.growth_interval = 0}).find("growth_interval should be >= 1"), std::string::npos);
  EXPECT_NE(throws({.init_scale = 0.0}).find("init_scale"), std::string::npos);
  EXPECT_NE(throws({.init_scale = 1e300}).find("does not fit a float32"), std::string::npos);
  optim::LossScaler s;
  EXPECT_THROW(s.set_state(-1.0f, 0), Error);
  EXPECT_THROW(s.set_state(INFINITY, 0), Error);
  EXPECT_THROW(s.set_state(2.0f, -3), Error);
  EXPECT_EQ(s.scale(), 65536.0f);  // untouched by the refused states
}

// ---- TrainingSession in bf16 / fp16 ----

TrainingConfig config(Precision p) {
  TrainingConfig cfg;
  cfg.optimizer = {.name = "adamw", .lr = 0.01};
  cfg.threads = 1;
  cfg.precision = p;
  return cfg;
}

/// Nodes of `m` that read value `name`.
size_t readers(const Model& m, const std::string& name) {
  const Value* v = m.graph->find_value(name);
  return v ? v->consumers.size() : 0;
}

TEST(MixedPrecision, EachWeightIsCastOnceAndGradientsComeBackInFloat32) {
  for (Precision p : {Precision::BFloat16, Precision::Float16}) {
    TrainingSession ts(mlp_model(8, 16, 3), config(p));
    const Model& tm = ts.training_model();
    const DataType low = precision_dtype(p);
    for (const char* w : {"w1", "w2"}) {
      // The float32 master weight feeds exactly one node, its Cast to the low format.
      const Value* v = tm.graph->find_value(w);
      ASSERT_EQ(readers(tm, w), 1u) << w;
      const Node* cast = v->consumers[0].first;
      EXPECT_EQ(cast->op_type, "Cast") << w;
      EXPECT_EQ(cast->attr_int("to", 0), static_cast<int64_t>(low)) << w;
    }
    // Gemms run in the low format, forward and backward.
    size_t low_gemms = 0;
    for (const auto& n : tm.graph->nodes())
      if ((n->op_type == "Gemm" || n->op_type == "MatMul") && n->inputs[0]->type.elem == low) ++low_gemms;
    EXPECT_GE(low_gemms, 4u) << precision_name(p);
    auto batch = class_batch(16, 8, 3, 1);
    StepResult r = ts.train_step_detailed(batch);
    EXPECT_TRUE(r.stepped);
    EXPECT_EQ(ts.flat_gradients().dtype(), DataType::Float);
    EXPECT_EQ(ts.flat_parameters().dtype(), DataType::Float);
    EXPECT_EQ(r.loss_scale, p == Precision::Float16 ? 65536.0 : 0.0);
    EXPECT_EQ(ts.loss_scale(), p == Precision::Float16 ? 65536.0 : 0.0);
  }
}

TEST(MixedPrecision, TracksFloat32TrainingWithinTheFormatsTolerance) {
  TrainingSession f32(mlp_model(8, 16, 3), config(Precision::Float32));
  TrainingSession bf16(mlp_model(8, 16, 3), config(Precision::BFloat16));
  TrainingSession fp16(mlp_model(8, 16, 3), config(Precision::Float16));
  double first = 0, l32 = 0, lb = 0, lh = 0;
  for (int s = 0; s < 40; ++s) {
    auto batch = class_batch(32, 8, 3, 100 + s);
    l32 = f32.train_step(batch);
    lb = bf16.train_step(batch);
    lh = fp16.train_step(batch);
    if (s == 0) {
      first = l32;
      // Same weights, one step: the losses differ by the rounding of the products only.
      EXPECT_NEAR(lb, l32, 2e-2 * l32);
      EXPECT_NEAR(lh, l32, 3e-3 * l32);
    }
  }
  EXPECT_LT(l32, 0.6 * first);
  EXPECT_NEAR(lb, l32, 0.1 * l32 + 0.02);
  EXPECT_NEAR(lh, l32, 0.05 * l32 + 0.01);
}

/// A batch that overflows float16 (|x| up to ~3e5, past its 65504), so that its fp16 forward and
/// gradients are inf/NaN at any scale; bfloat16 holds it. (At 1e4 it overflowed only the fp16
/// weight gradients, which GemmCast now writes in float32.)
NamedTensors overflowing_batch() {
  auto b = class_batch(8, 8, 3, 5);
  float* x = b.at("x").data<float>();
  for (int64_t i = 0; i < b.at("x").numel(); ++i) x[i] *= 1e5f;
  return b;
}

TEST(MixedPrecision, Fp16SkipsOverflowingStepsAndBacksOff) {
  TrainingConfig cfg = config(Precision::Float16);
  cfg.loss_scaler = {.init_scale = 1024.0, .growth_interval = 2};
  TrainingSession ts(mlp_model(8, 16, 3), cfg);
  Tensor before = ts.flat_parameters().clone();
  StepResult r = ts.train_step_detailed(overflowing_batch());
  EXPECT_TRUE(r.skipped);
  EXPECT_FALSE(r.stepped);
  EXPECT_EQ(r.loss_scale, 1024.0);
  EXPECT_EQ(ts.loss_scale(), 512.0);
  EXPECT_EQ(ts.step(), 0);
  EXPECT_EQ(std::memcmp(before.raw(), ts.flat_parameters().raw(), before.nbytes()), 0)
      << "a skipped step changed the weights";
  // Two clean steps: taken, and the scale grows back after growth_interval of them.
  for (int s = 0; s < 2; ++s) {
    r = ts.train_step_detailed(class_batch(8, 8, 3, 10 + s));
    EXPECT_TRUE(r.stepped);
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(r.loss_scale, 512.0);
  }
  EXPECT_EQ(ts.loss_scale(), 1024.0);
  EXPECT_EQ(ts.step(), 2);
}

TEST(MixedPrecision, WithoutAScalerAnOverflowIsAnError) {
  // bf16 has float32's range: the same batch trains; an inf in the data is an error as in fp32.
  TrainingSession ts(mlp_model(8, 16, 3), config(Precision::BFloat16));
  EXPECT_TRUE(ts.train_step_detailed(overflowing_batch()).stepped);
  auto bad = class_batch(8, 8, 3, 6);
  bad.at("x").data<float>()[3] = INFINITY;
  Tensor before = ts.flat_parameters().clone();
  EXPECT_THROW(ts.train_step(bad), Error);
  EXPECT_EQ(std::memcmp(before.raw(), ts.flat_parameters().raw(), before.nbytes()), 0);
}

TEST(MixedPrecision, Fp16WithAccumulationSkipsTheWholeGroup) {
  TrainingConfig cfg = config(Precision::Float16);
  cfg.accumulation_steps = 2;
  cfg.loss_scaler.init_scale = 1024.0;
  TrainingSession ts(mlp_model(8, 16, 3), cfg);
  Tensor before = ts.flat_parameters().clone();
  EXPECT_FALSE(ts.train_step_detailed(overflowing_batch()).stepped);
  StepResult r = ts.train_step_detailed(class_batch(8, 8, 3, 7));  // clean, but the group overflowed
  EXPECT_TRUE(r.skipped);
  EXPECT_EQ(ts.step(), 0);
  EXPECT_EQ(std::memcmp(before.raw(), ts.flat_parameters().raw(), before.nbytes()), 0);
  r = ts.train_step_detailed(class_batch(8, 8, 3, 8));
  r = ts.train_step_detailed(class_batch(8, 8, 3, 9));
  EXPECT_TRUE(r.stepped);
  EXPECT_EQ(ts.step(), 1);
}

TEST(MixedPrecision, CheckpointsKeepTheScalerAndResumeBitIdentically) {
  TrainingConfig cfg = config(Precision::Float16);
  cfg.loss_scaler = {.init_scale = 4096.0, .growth_interval = 3};
  auto batch = [](int s) { return s == 1 ? overflowing_batch() : class_batch(8, 8, 3, 50 + s); };
  const std::string path = (std::filesystem::temp_directory_path() / "onyx_amp_ckpt.onyx").string();
  TrainingSession a(mlp_model(8, 16, 3), cfg);
  for (int s = 0; s < 3; ++s) a.train_step(batch(s));
  a.save_checkpoint(path);
  const double scale_at_save = a.loss_scale();
  EXPECT_EQ(scale_at_save, 2048.0);  // one overflow
  for (int s = 3; s < 7; ++s) a.train_step(batch(s));

  TrainingSession b(mlp_model(8, 16, 3), cfg);
  b.load_checkpoint(path);
  EXPECT_EQ(b.loss_scale(), scale_at_save);
  for (int s = 3; s < 7; ++s) b.train_step(batch(s));
  EXPECT_EQ(b.loss_scale(), a.loss_scale());
  EXPECT_EQ(b.loss_scale(), 4096.0);  // grew after 3 clean steps
  EXPECT_EQ(b.step(), a.step());
  EXPECT_EQ(std::memcmp(a.flat_parameters().raw(), b.flat_parameters().raw(), a.flat_parameters().nbytes()), 0);
  std::filesystem::remove(path);
}

// TrainingConfig::low_precision_weight_copies: the 16-bit weights the optimizer writes give the
// bits the graph's Casts give, with every optimizer, bf16 and fp16, accumulation and
// recomputation, and for torch's transposed spelling of a linear layer; no Cast of a weight runs
// in the training graph (the profile shows none).
TEST(MixedPrecision, OptimizersWeightCopiesGiveTheCastsBits) {
  struct Case {
    Precision p;
    optim::OptimizerConfig opt;
    int accumulation;
    bool recompute;
    bool transposed = false;
  };
  const Case cases[] = {
      {Precision::BFloat16, {.name = "adamw", .lr = 0.01, .weight_decay = 0.1}, 1, false},
      {Precision::Float16, {.name = "adamw", .lr = 0.01}, 1, false},
      {Precision::BFloat16, {.name = "sgd", .lr = 0.05, .momentum = 0.9}, 2, false},
      {Precision::BFloat16, {.name = "lamb", .lr = 0.01}, 1, true},
      {Precision::BFloat16, {.name = "adamw", .lr = 0.01}, 1, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {} accumulation {} recompute {} transposed {}", precision_name(c.p),
                             c.opt.name, c.accumulation, c.recompute, c.transposed));
    auto model = [&] { return c.transposed ? transposed_mlp_model(8, 16, 3) : mlp_model(8, 16, 3); };
    const auto path = std::filesystem::temp_directory_path() /
                      ("onyx_amp_copies_" + std::to_string(::getpid()) + ".json");
    TrainingConfig on = config(c.p);
    on.optimizer = c.opt;
    on.accumulation_steps = c.accumulation;
    if (c.recompute) on.recompute.pattern = "^[A-Za-z]";  // segments by first letter: casts too
    on.profile_path = path.string();
    TrainingConfig off = on;
    off.low_precision_weight_copies = false;
    off.profile_path.clear();
    TrainingSession a(model(), on), b(model(), off);
    for (int s = 0; s < 6; ++s) {
      auto batch = class_batch(16, 8, 3, 300 + s);
      ASSERT_EQ(a.train_step(batch), b.train_step(batch)) << "step " << s;
    }
    ASSERT_EQ(a.end_profiling(), path.string());
    std::ifstream f(path);
    nlohmann::json trace = nlohmann::json::parse(f);
    int weight_casts = 0, nodes = 0;
    for (const auto& e : trace.at("traceEvents")) {
      if (e.value("cat", "") != "node") continue;
      ++nodes;
      const std::string name = e.at("name");
      if (e.at("args").value("op", "") == "Cast" && name.find("_grad") == std::string::npos &&
          (name.rfind("w1", 0) == 0 || name.rfind("w2", 0) == 0))
        ++weight_casts;
    }
    EXPECT_GT(nodes, 10);
    EXPECT_EQ(weight_casts, 0);
    std::filesystem::remove(path);
    const Tensor pa = a.flat_parameters(), pb = b.flat_parameters();
    EXPECT_EQ(std::memcmp(pa.raw(), pb.raw(), pa.nbytes()), 0);
  }
}

// Parameters changed other than by the optimizer reach the 16-bit copy: set_parameter, a write
// through parameter()'s view (and any later one through the same view), a checkpoint load.
TEST(MixedPrecision, WeightCopiesFollowParameterWrites) {
  TrainingConfig off = config(Precision::BFloat16);
  off.low_precision_weight_copies = false;
  TrainingSession a(mlp_model(8, 16, 3), config(Precision::BFloat16)), b(mlp_model(8, 16, 3), off);
  auto both = [&](int seed) {
    auto batch = class_batch(16, 8, 3, seed);
    const double la = a.train_step(batch), lb = b.train_step(batch);
    EXPECT_EQ(la, lb) << "batch " << seed;
  };
  both(1);
  both(2);
  Tensor w1 = Tensor::zeros(DataType::Float, {16, 8});
  for (int64_t i = 0; i < w1.numel(); ++i) w1.data<float>()[i] = 0.01f * static_cast<float>(i % 13);
  a.set_parameter("w1", w1);
  b.set_parameter("w1", w1);
  both(3);
  Tensor va = a.parameter("w2"), vb = b.parameter("w2");
  both(4);
  va.data<float>()[0] += 0.5f;  // a write through a view taken before the last step
  vb.data<float>()[0] += 0.5f;
  both(5);
  const std::string path = (std::filesystem::temp_directory_path() / "onyx_amp_copies.onyx").string();
  TrainingSession c(mlp_model(8, 16, 3), config(Precision::BFloat16));
  for (int s = 0; s < 3; ++s) c.train_step(class_batch(16, 8, 3, 40 + s));
  c.save_checkpoint(path);
  TrainingSession d(mlp_model(8, 16, 3), config(Precision::BFloat16)), e(mlp_model(8, 16, 3), off);
  d.train_step(class_batch(16, 8, 3, 50));  // its copy is fresh from its own step, then loaded over
  d.load_checkpoint(path);
  e.load_checkpoint(path);
  for (int s = 0; s < 2; ++s) {
    auto batch = class_batch(16, 8, 3, 60 + s);
    EXPECT_EQ(d.train_step(batch), e.train_step(batch)) << "after the load, step " << s;
  }
  std::filesystem::remove(path);
}

TEST(MixedPrecision, ExportedModelIsTheFloat32Forward) {
  TrainingSession ts(mlp_model(8, 16, 3), config(Precision::BFloat16));
  ts.train_step(class_batch(16, 8, 3, 3));
  auto m = ts.inference_model();
  for (const auto& n : m->graph->nodes()) EXPECT_NE(n->op_type, "Cast");
  EXPECT_EQ(m->graph->initializers.at("w1").dtype(), DataType::Float);
}

}  // namespace
}  // namespace onyx::test
