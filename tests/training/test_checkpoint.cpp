// Checkpoints: bit-identical resume, atomic writes under SIGKILL, corrupt and foreign files.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "training/checkpoint.h"
#include "training/training_session.h"
#include "training_models.h"

namespace onyx::test {

namespace {

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("onyx_ckpt_" + std::to_string(::getpid()) + "_" + name)).string();
}

TrainingConfig adam_dropout_config(int accumulation) {
  TrainingConfig c;
  c.optimizer = {.name = "adamw", .lr = 0.01, .weight_decay = 0.01};
  c.schedule = {.kind = "cosine", .warmup_steps = 2, .total_steps = 20};
  c.accumulation_steps = accumulation;
  c.clip_norm = 1.0;
  c.seed = 1234;
  c.threads = 2;
  return c;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST(Checkpoint, ResumeIsBitIdentical) {
  for (int accumulation : {1, 2}) {
    SCOPED_TRACE(accumulation);
    auto cfg = adam_dropout_config(accumulation);
    const int N = 5, M = 4;  // with accumulation 2, N=5 saves mid-accumulation
    TrainingSession straight(mlp_model(8, 16, 3, true), cfg);
    for (int s = 0; s < N + M; ++s) straight.train_step(class_batch(8, 8, 3, static_cast<uint32_t>(s)));

    std::string path = tmp_path("resume");
    {
      TrainingSession first(mlp_model(8, 16, 3, true), cfg);
      for (int s = 0; s < N; ++s) first.train_step(class_batch(8, 8, 3, static_cast<uint32_t>(s)));
      first.save_checkpoint(path);
    }
    TrainingSession resumed(mlp_model(8, 16, 3, true), cfg);
    resumed.load_checkpoint(path);
    for (int s = N; s < N + M; ++s) resumed.train_step(class_batch(8, 8, 3, static_cast<uint32_t>(s)));
    EXPECT_EQ(resumed.step(), straight.step());
    EXPECT_TRUE(same_bits(resumed.flat_parameters(), straight.flat_parameters()));
    std::filesystem::remove(path);
  }
}

TEST(Checkpoint, KilledMidSaveLeavesTheLastGoodCheckpoint) {
  std::string path = tmp_path("atomic");
  // A model big enough that a save takes a while (about 16 MB of parameters).
  TrainingConfig cfg = adam_dropout_config(1);
  TrainingSession ts(mlp_model(512, 4096, 10), cfg);
  ts.train_step(class_batch(4, 512, 10, 1));
  ts.save_checkpoint(path);
  for (int trial = 0; trial < 5; ++trial) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: keep training and saving until killed.
      for (int s = 2;; ++s) {
        ts.train_step(class_batch(4, 512, 10, static_cast<uint32_t>(s)));
        ts.save_checkpoint(path);
      }
    }
    ::usleep(static_cast<useconds_t>(30000 + 70000 * trial));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    // Whatever moment the kill hit, the file is a complete checkpoint that loads.
    TrainingSession check(mlp_model(512, 4096, 10), cfg);
    EXPECT_NO_THROW(check.load_checkpoint(path)) << "trial " << trial;
    EXPECT_GE(check.step(), 1);
  }
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    if (e.path().filename().string().find(std::filesystem::path(path).filename().string() + ".tmp-") != std::string::npos)
      std::filesystem::remove(e.path());
  std::filesystem::remove(path);
}

TEST(Checkpoint, CorruptTruncatedAndForeignFilesAreRefused) {
  std::string path = tmp_path("bad");
  TrainingConfig cfg = adam_dropout_config(1);
  TrainingSession ts(mlp_model(8, 16, 3), cfg);
  ts.train_step(class_batch(8, 8, 3, 1));
  ts.save_checkpoint(path);
  auto before = ts.flat_parameters().clone();

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& b) { std::ofstream(path, std::ios::binary | std::ios::trunc) << b; };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x5a;
  write(flipped);
  EXPECT_THROW(ts.load_checkpoint(path), Error);
  write(bytes.substr(0, bytes.size() - 100));
  EXPECT_THROW(ts.load_checkpoint(path), Error);
  write("not a checkpoint");
  EXPECT_THROW(ts.load_checkpoint(path), Error);
  EXPECT_THROW(ts.load_checkpoint(tmp_path("missing")), Error);

  // A checkpoint of another model (different hidden size) or another optimizer.
  write(bytes);
  TrainingSession other(mlp_model(8, 12, 3), cfg);
  try {
    other.load_checkpoint(path);
    ADD_FAILURE() << "foreign checkpoint accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
  TrainingConfig sgd = cfg;
  sgd.optimizer.name = "sgd";
  TrainingSession other_opt(mlp_model(8, 16, 3), sgd);
  EXPECT_THROW(other_opt.load_checkpoint(path), Error);
  // Failed loads left the session untouched.
  EXPECT_TRUE(same_bits(ts.flat_parameters(), before));
  std::filesystem::remove(path);
}

}  // namespace onyx::test
