// Data-parallel training under mpirun (2 and 3 ranks): N ranks with batch b train exactly
// like one process with batch N*b; every rank holds identical weights after every step;
// mismatched models are refused; checkpoints do not depend on the number of ranks; a save
// that fails on rank 0 fails on every rank, and training goes on.
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "distributed/communicator.h"
#include "distributed/data_parallel.h"
#include "launcher/train_checkpoints.h"
#include "training/training_session.h"
#include "training_models.h"

namespace onyx::test {

namespace {

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> comm = dist::make_mpi_communicator();
  return comm;
}

/// Rows [begin, begin + n) of a batch tensor.
Tensor rows(const Tensor& t, int64_t begin, int64_t n) {
  Shape s = t.shape();
  int64_t row = t.numel() / s[0];
  s[0] = n;
  Tensor out = Tensor::empty(t.dtype(), s);
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + begin * row * dtype_size(t.dtype()),
              out.nbytes());
  return out;
}

NamedTensors shard(const NamedTensors& global, int rank, int64_t b) {
  NamedTensors out;
  for (const auto& [n, t] : global) out[n] = rows(t, rank * b, b);
  return out;
}

/// x[N,1,6,6] -> Conv 3x3 (4 ch) -> Relu -> MaxPool 2 -> Flatten -> Gemm -> 3 classes.
std::unique_ptr<Model> cnn_model() {
  std::mt19937 rng(21);
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(1), Dim::fixed(6), Dim::fixed(6)});
  b.initializer("cw", random_tensor({4, 1, 3, 3}, rng));
  b.initializer("cb", random_tensor({4}, rng, 0.1));
  b.initializer("fw", random_tensor({3, 16}, rng));
  b.initializer("fb", random_tensor({3}, rng, 0.1));
  set_attrs(b.node("Conv", {"x", "cw", "cb"}, {"c"}), {attr_ints("kernel_shape", {3, 3})});
  b.node("Relu", {"c"}, {"r"});
  set_attrs(b.node("MaxPool", {"r"}, {"p"}), {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  b.node("Flatten", {"p"}, {"f"});
  set_attrs(b.node("Gemm", {"f", "fw", "fb"}, {"logits"}), {attr_int("transB", 1)});
  b.output("logits");
  return b.build();
}

NamedTensors image_batch(int64_t n, uint32_t seed) {
  auto cb = class_batch(n, 36, 3, seed);
  return {{"x", cb.at("x").reshape({n, 1, 6, 6})}, {"labels", cb.at("labels")}};
}

std::vector<uint64_t> checksums(dist::Communicator& comm, const Tensor& t) {
  Tensor in = Tensor::from_vector<int64_t>({1}, {static_cast<int64_t>(dist::tensor_checksum(t))});
  Tensor out = Tensor::zeros(DataType::Int64, {comm.size()});
  comm.allgather(in, out)->wait();
  return std::vector<uint64_t>(out.data<int64_t>(), out.data<int64_t>() + comm.size());
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.data<float>()[i], y = b.data<float>()[i];
    m = std::max(m, std::abs(x - y) / std::max(1e-3, std::abs(y)));
  }
  return m;
}

using ModelFn = std::unique_ptr<Model> (*)();
using BatchFn = NamedTensors (*)(int64_t, uint32_t);

std::unique_ptr<Model> mlp() { return mlp_model(8, 16, 3); }
NamedTensors mlp_batch(int64_t n, uint32_t seed) { return class_batch(n, 8, 3, seed); }

/// Trains 5 optimizer steps data-parallel and in one process with the global batch. In bf16
/// each rank rounds its own gradient sums to bf16 before the float32 allreduce, so the two
/// agree within bf16's tolerance rather than float32's.
void check_equivalence(ModelFn model, BatchFn batch, int accumulation,
                       Precision precision = Precision::Float32) {
  auto comm = world();
  const int64_t b = 4;
  TrainingConfig cfg;
  cfg.optimizer = {.name = "adamw", .lr = 0.01, .weight_decay = 0.01};
  cfg.clip_norm = 1.0;
  cfg.threads = 1;
  cfg.accumulation_steps = accumulation;
  cfg.precision = precision;
  const double tol = precision == Precision::Float32 ? 1e-5 : 3e-2;
  TrainingConfig dp = cfg;
  dp.communicator = comm;
  dp.buckets = {.first_bucket_bytes = 256, .bucket_bytes = 1024};  // several buckets on small models
  TrainingSession par(model(), dp), single(model(), cfg);
  EXPECT_GT(par.num_gradient_buckets(), 1u);
  const int64_t global = b * comm->size();
  for (int step = 0; step < 5; ++step) {
    for (int m = 0; m < accumulation; ++m) {
      auto g = batch(global, static_cast<uint32_t>(100 * step + m));
      StepResult rp = par.train_step_detailed(shard(g, comm->rank(), b));
      StepResult rs = single.train_step_detailed(g);
      const double lp = rp.loss, ls = rs.loss;
      EXPECT_NEAR(lp, ls, tol * std::max(1.0, std::abs(ls)));
      // The allreduce wait is measured on the group's last micro-batch only, and only with ranks.
      EXPECT_EQ(rs.comm_wait_ms, 0.0);
      if (rp.stepped) EXPECT_GT(rp.comm_wait_ms, 0.0);
      else EXPECT_EQ(rp.comm_wait_ms, 0.0);
    }
    auto sums = checksums(*comm, par.flat_parameters());
    for (int r = 1; r < comm->size(); ++r) EXPECT_EQ(sums[r], sums[0]) << "rank " << r << " step " << step;
  }
  if (precision == Precision::Float32) {
    EXPECT_LT(max_rel_diff(par.flat_parameters(), single.flat_parameters()), tol);
  } else {
    // Parameters near zero make element-wise relative errors meaningless at bf16's precision:
    // the largest difference relative to the largest parameter.
    const Tensor a = par.flat_parameters(), b = single.flat_parameters();
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      diff = std::max(diff, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
      scale = std::max(scale, std::abs(double(b.data<float>()[i])));
    }
    EXPECT_LT(diff / scale, tol) << "largest difference " << diff << ", largest parameter " << scale;
  }
}

}  // namespace

TEST(DataParallel, MlpMatchesOneProcessWithTheGlobalBatch) { check_equivalence(mlp, mlp_batch, 1); }
TEST(DataParallel, MlpWithAccumulation) { check_equivalence(mlp, mlp_batch, 2); }
TEST(DataParallel, CnnMatchesOneProcessWithTheGlobalBatch) { check_equivalence(cnn_model, image_batch, 1); }
TEST(DataParallel, CnnWithAccumulation) { check_equivalence(cnn_model, image_batch, 2); }
TEST(DataParallel, MlpInBf16MatchesOneProcess) {
  check_equivalence(mlp, mlp_batch, 1, Precision::BFloat16);
}
TEST(DataParallel, CnnInBf16MatchesOneProcess) {
  check_equivalence(cnn_model, image_batch, 2, Precision::BFloat16);
}

/// fp16: one rank's gradients overflow, the others' do not; every rank skips the step, backs
/// off the same scale and keeps identical weights; the next clean step is taken everywhere.
TEST(DataParallel, Fp16OverflowOnOneRankSkipsTheStepOnEveryRank) {
  auto comm = world();
  TrainingConfig cfg;
  cfg.optimizer = {.name = "adamw", .lr = 0.01};
  cfg.threads = 1;
  cfg.precision = Precision::Float16;
  cfg.loss_scaler.init_scale = 1024.0;
  cfg.communicator = comm;
  TrainingSession ts(mlp(), cfg);
  Tensor before = ts.flat_parameters().clone();
  auto b = mlp_batch(4, 30 + static_cast<uint32_t>(comm->rank()));
  if (comm->rank() == comm->size() - 1) {
    float* x = b.at("x").data<float>();
    // Past float16's 65504: its forward and gradients overflow. (At 1e4 only the fp16 weight
    // gradients overflowed, which GemmCast now writes in float32.)
    for (int64_t i = 0; i < b.at("x").numel(); ++i) x[i] *= 1e5f;
  }
  StepResult r = ts.train_step_detailed(b);
  EXPECT_TRUE(r.skipped);
  EXPECT_FALSE(r.stepped);
  EXPECT_EQ(ts.loss_scale(), 512.0);
  EXPECT_EQ(ts.step(), 0);
  EXPECT_EQ(std::memcmp(before.raw(), ts.flat_parameters().raw(), before.nbytes()), 0);
  r = ts.train_step_detailed(mlp_batch(4, 40 + static_cast<uint32_t>(comm->rank())));
  EXPECT_TRUE(r.stepped);
  EXPECT_EQ(ts.step(), 1);
  auto sums = checksums(*comm, ts.flat_parameters());
  for (int k = 1; k < comm->size(); ++k) EXPECT_EQ(sums[k], sums[0]) << "rank " << k;
}

TEST(DataParallel, IntegerValuedDataIsBitIdentical) {
  // Small integers and power-of-two batch sizes: every sum is exact, so the data-parallel
  // weights equal the one-process weights bit for bit.
  auto comm = world();
  if (comm->size() & (comm->size() - 1)) GTEST_SKIP() << "needs a power-of-two number of ranks";
  // y = x W^T + b with integer weights.
  TrainingConfig cfg;
  cfg.loss.kind = "mse";
  cfg.optimizer = {.name = "sgd", .lr = 0.0625};
  cfg.threads = 1;
  TrainingConfig dp = cfg;
  dp.communicator = comm;
  auto copy = [&] {
    ModelBuilder m2(17);
    m2.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(4)});
    m2.initializer("W", T_<float>({2, 4}, {1, -1, 0, 2, 0, 1, 1, -2}));
    m2.initializer("b", T_<float>({2}, {1, 0}));
    set_attrs(m2.node("Gemm", {"x", "W", "b"}, {"y"}), {attr_int("transB", 1)});
    m2.output("y");
    return m2.build();
  };
  TrainingSession par(copy(), dp), single(copy(), cfg);
  const int64_t b = 4, global = b * comm->size();
  for (int step = 0; step < 5; ++step) {
    std::vector<double> xv, yv;
    for (int64_t i = 0; i < global * 4; ++i) xv.push_back(static_cast<double>((i * 7 + step) % 5) - 2);
    for (int64_t i = 0; i < global * 2; ++i) yv.push_back(static_cast<double>((i * 3 + step) % 4) - 1);
    NamedTensors g = {{"x", T_<float>({global, 4}, xv)}, {"labels", T_<float>({global, 2}, yv)}};
    par.train_step(shard(g, comm->rank(), b));
    single.train_step(g);
  }
  Tensor a = par.flat_parameters(), s = single.flat_parameters();
  EXPECT_EQ(std::memcmp(a.raw(), s.raw(), a.nbytes()), 0);
}

TEST(DataParallel, DifferentModelsAreRefusedBeforeTraining) {
  auto comm = world();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  TrainingConfig cfg;
  cfg.communicator = comm;
  cfg.threads = 1;
  try {
    TrainingSession ts(mlp_model(8, comm->rank() == 1 ? 12 : 16, 3), cfg);
    ADD_FAILURE() << "a different model on rank 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, CheckpointsDoNotDependOnTheNumberOfRanks) {
  // Written by N ranks; resumed by one process (batch N*b) it continues exactly like the
  // data-parallel run. The file is also left for the other world sizes' test runs.
  auto comm = world();
  const int64_t b = 4, global = b * comm->size();
  TrainingConfig cfg;
  cfg.optimizer = {.name = "adam", .lr = 0.01};
  cfg.threads = 1;
  TrainingConfig dp = cfg;
  dp.communicator = comm;
  std::string dir = std::getenv("ONYX_DP_CKPT_DIR") ? std::getenv("ONYX_DP_CKPT_DIR")
                                                     : std::filesystem::temp_directory_path().string();
  std::string path = dir + "/onyx_dp_" + std::to_string(comm->size()) + ".ckpt";
  TrainingSession par(mlp(), dp);
  for (int s = 0; s < 3; ++s) par.train_step(shard(mlp_batch(global, static_cast<uint32_t>(s)), comm->rank(), b));
  par.save_checkpoint(path);
  TrainingSession single(mlp(), cfg);
  single.load_checkpoint(path);
  EXPECT_EQ(single.step(), 3);
  for (int s = 3; s < 6; ++s) {
    auto g = mlp_batch(global, static_cast<uint32_t>(s));
    par.train_step(shard(g, comm->rank(), b));
    single.train_step(g);
  }
  EXPECT_LT(max_rel_diff(par.flat_parameters(), single.flat_parameters()), 1e-5);
  // Checkpoints written by the world sizes ONYX_DP_RESUME_FROM lists ("2,3"; ctest runs 2
  // ranks, then 3, then 1) resume here; a listed one that is missing is a failure, not a skip.
  const char* from = std::getenv("ONYX_DP_RESUME_FROM");
  std::vector<int> others;
  for (const char* c = from ? from : ""; *c; ++c)
    if (*c >= '1' && *c <= '9') others.push_back(*c - '0');
  for (int other : others) {
    std::string p = dir + "/onyx_dp_" + std::to_string(other) + ".ckpt";
    if (other == comm->size()) continue;
    if (!std::filesystem::exists(p)) {
      ADD_FAILURE() << p << " is missing: the " << other
                    << "-rank run writes it (ctest -R data_parallel runs it first)";
      continue;
    }
    TrainingSession resumed(mlp(), dp);
    EXPECT_NO_THROW(resumed.load_checkpoint(p)) << p;
    EXPECT_EQ(resumed.step(), 3);
    resumed.train_step(shard(mlp_batch(global, 9), comm->rank(), b));
    auto sums = checksums(*comm, resumed.flat_parameters());
    for (int r = 1; r < comm->size(); ++r) EXPECT_EQ(sums[r], sums[0]);
  }
}

// `onyx train`'s saves under data parallelism: rank 0 writes, so when its layout .json or its
// checkpoint cannot be written (here a folder stands where the file goes), every rank gets
// onyx::Error instead of waiting in a collective, no layout is left without its checkpoint,
// and the ranks train on in step and save the next checkpoint.
TEST(DataParallel, FailedSaveReachesEveryRankAndTrainingGoesOn) {
  auto comm = world();
  const int64_t b = 4, global = b * comm->size();
  TrainingConfig cfg;
  cfg.optimizer = {.name = "adam", .lr = 0.01};
  cfg.threads = 1;
  cfg.communicator = comm;
  const std::string base = std::getenv("ONYX_DP_CKPT_DIR") ? std::getenv("ONYX_DP_CKPT_DIR")
                                                           : std::filesystem::temp_directory_path().string();
  const std::string dir = base + "/onyx_dp_fail_" + std::to_string(comm->size());
  if (comm->rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir + "/step-00000001.json/blocker");
    std::filesystem::create_directories(dir + "/step-00000002.onyx/blocker");
  }
  comm->barrier();
  const cli::RunLayout layout{global * 10, global, 1, false};
  TrainingSession par(mlp(), cfg);
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE(fmt::format("step {}", step));
    par.train_step(shard(mlp_batch(global, static_cast<uint32_t>(step)), comm->rank(), b));
    if (step == 3) {
      EXPECT_NO_THROW(cli::save_run_checkpoint(par, dir, layout));
      continue;
    }
    const std::string failed = fmt::format("{}/step-{:08d}.{}", dir, step, step == 1 ? "json" : "onyx");
    try {
      cli::save_run_checkpoint(par, dir, layout);
      ADD_FAILURE() << "saved over the folder " << failed;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (comm->rank() == 0) {
        EXPECT_NE(what.find(failed), std::string::npos) << what;
        EXPECT_NE(what.find(std::strerror(EISDIR)), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("rank 0 failed to write '" + failed + "'"), std::string::npos) << what;
      }
    }
  }
  comm->barrier();
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000002.json"));
  TrainingSession resumed(mlp(), cfg);
  resumed.load_checkpoint(dir + "/step-00000003.onyx");
  EXPECT_EQ(resumed.step(), 3);
  auto sums = checksums(*comm, par.flat_parameters());
  for (int r = 1; r < comm->size(); ++r) EXPECT_EQ(sums[r], sums[0]);
  EXPECT_EQ(checksums(*comm, resumed.flat_parameters()), sums);
  comm->barrier();
  if (comm->rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace onyx::test
