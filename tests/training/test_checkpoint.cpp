// Checkpoints: bit-identical resume, atomic writes under SIGKILL, a full disk, failed renames,
// corrupt and foreign files.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "graph/hash.h"
#include "small_disk.h"
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

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// The names in `dir`, without the small disk's filler.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename() != test::SmallDisk::filler_name()) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
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
  // One thread: libgomp is not fork-safe, and a child forked after the parent's OpenMP pool
  // has run hangs in its first parallel region (with 2 threads no child ever saved).
  cfg.threads = 1;
  TrainingSession ts(mlp_model(512, 4096, 10), cfg);
  ts.train_step(class_batch(4, 512, 10, 1));
  const std::string start = tmp_path("atomic_start");
  ts.save_checkpoint(start);
  int64_t newest = 1;  // the latest step any trial loaded: the children must get that far
  for (int trial = 0; trial < 5; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    ts.save_checkpoint(path);  // step 1: what the file holds before the child's first save
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: keep training and saving until killed, announcing each save's step first.
      ::close(fds[0]);
      for (int64_t s = 2;; ++s) {
        ts.train_step(class_batch(4, 512, 10, static_cast<uint32_t>(s)));
        if (::write(fds[1], &s, sizeof s) != sizeof s) ::_exit(3);
        ts.save_checkpoint(path);
      }
    }
    ::close(fds[1]);
    // Trial 0 kills before any save is likely; trial t once the save of step t + 1 has begun
    // (however slow this machine is), 10 ms later (mid-save) or 200 ms later (after it).
    int64_t started = 1;  // the step of the last save the child began (1: none)
    while (trial > 0 && started < trial + 1) {
      pollfd pfd{fds[0], POLLIN, 0};
      ASSERT_EQ(::poll(&pfd, 1, 30000), 1) << "the child announced no save in 30 s";
      ASSERT_EQ(::read(fds[0], &started, sizeof started), static_cast<ssize_t>(sizeof started));
    }
    ::usleep(static_cast<useconds_t>(trial == 0 ? 30000 : trial % 2 ? 10000 : 200000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    for (int64_t s; ::read(fds[0], &s, sizeof s) == sizeof s;) started = s;
    ::close(fds[0]);
    // Whatever moment the kill hit, the file is a complete checkpoint that loads, and it is
    // exactly the state before the interrupted save or after it: its step is one of the two
    // and its parameters are bit for bit those of a replay to that step.
    TrainingSession check(mlp_model(512, 4096, 10), cfg);
    ASSERT_NO_THROW(check.load_checkpoint(path));
    const int64_t k = check.step();
    EXPECT_TRUE(k == started || k == std::max<int64_t>(1, started - 1))
        << "loaded step " << k << ", the interrupted save was step " << started;
    TrainingSession replay(mlp_model(512, 4096, 10), cfg);
    replay.load_checkpoint(start);
    for (int64_t s = 2; s <= k; ++s) replay.train_step(class_batch(4, 512, 10, static_cast<uint32_t>(s)));
    EXPECT_EQ(replay.step(), k);
    EXPECT_TRUE(same_bits(check.flat_parameters(), replay.flat_parameters())) << "step " << k;
    newest = std::max(newest, k);
  }
  EXPECT_GT(newest, 1) << "no child completed a save before it was killed";
  std::filesystem::remove(start);
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    if (e.path().filename().string().find(std::filesystem::path(path).filename().string() + ".tmp-") != std::string::npos)
      std::filesystem::remove(e.path());
  std::filesystem::remove(path);
}

// A save that runs out of disk: a clear error, the previous checkpoint untouched and loadable,
// no temporary left, and the session goes on: after the disk has room again it trains and
// saves, ending bit for bit where an uninterrupted run ends.
TEST(Checkpoint, DiskFullKeepsThePreviousCheckpointAndTheSession) {
  TrainingConfig cfg = adam_dropout_config(1);
  cfg.threads = 1;  // the body runs in a forked child (libgomp is not fork-safe)
  const std::string disk_dir = tmp_path("disk"), final_path = tmp_path("disk_final");
  // About 33 KB per checkpoint (2762 parameters, Adam's two moments): the first fits on the
  // 256 KiB disk, the second not once the disk is filled to 16 KiB of room.
  auto model = [] { return mlp_model(32, 64, 10); };
  auto batch = [](int s) { return class_batch(8, 32, 10, static_cast<uint32_t>(s)); };
  test::SmallDiskResult r = test::on_small_disk(disk_dir, 256 << 10, [&](test::SmallDisk& disk) {
    const std::string path = disk.dir() + "/ck.onyx";
    TrainingSession ts(model(), cfg);
    for (int s = 1; s <= 2; ++s) ts.train_step(batch(s));
    ts.save_checkpoint(path);
    const std::string before = file_bytes(path);
    nlohmann::json out;
    out["size"] = before.size();
    disk.fill(16 << 10);
    ts.train_step(batch(3));
    try {
      ts.save_checkpoint(path);
      out["error"] = nullptr;
    } catch (const Error& e) {
      out["error"] = e.what();
    }
    out["files"] = names_in(disk.dir());
    out["intact"] = file_bytes(path) == before;
    TrainingSession check(model(), cfg);
    check.load_checkpoint(path);
    out["loaded_step"] = check.step();
    // Room again: the same session trains on and saves.
    disk.free();
    for (int s = 4; s <= 5; ++s) ts.train_step(batch(s));
    ts.save_checkpoint(path);
    ts.save_checkpoint(final_path);
    return out.dump();
  });
  ASSERT_EQ(r.error, "");
  std::string reason = r.kind == test::SmallDisk::Kind::Tmpfs ? std::strerror(ENOSPC) : std::strerror(EFBIG);
  RecordProperty("small_disk", r.kind == test::SmallDisk::Kind::Tmpfs ? "tmpfs" : "RLIMIT_FSIZE");
  nlohmann::json out = nlohmann::json::parse(r.text);
  ASSERT_GT(out["size"].get<size_t>(), 16u << 10) << "the checkpoint would fit in the room left";
  ASSERT_TRUE(out["error"].is_string()) << "the save on a full disk succeeded";
  const std::string error = out["error"];
  EXPECT_EQ(error.rfind("[checkpoint] saving '" + disk_dir + "/ck.onyx' failed: writing ", 0), 0u) << error;
  EXPECT_NE(error.find(" bytes at offset "), std::string::npos) << error;
  EXPECT_NE(error.find(reason), std::string::npos) << error;
  EXPECT_EQ(out["files"], nlohmann::json::array({"ck.onyx"})) << "a temporary was left behind";
  EXPECT_TRUE(out["intact"].get<bool>());
  EXPECT_EQ(out["loaded_step"].get<int64_t>(), 2);

  TrainingSession straight(model(), cfg);
  for (int s = 1; s <= 5; ++s) straight.train_step(batch(s));
  TrainingSession resumed(model(), cfg);
  resumed.load_checkpoint(final_path);
  EXPECT_EQ(resumed.step(), 5);
  EXPECT_TRUE(same_bits(resumed.flat_parameters(), straight.flat_parameters()));
  std::filesystem::remove(final_path);
  std::filesystem::remove_all(disk_dir);
}

// A rename that fails (the target is a folder): the error names both files and the reason,
// and the temporary is gone.
TEST(Checkpoint, FailedRenameRemovesTheTemporary) {
  const std::string dir = tmp_path("rename");
  std::filesystem::create_directories(dir + "/ck.onyx/inside");
  TrainingSession ts(mlp_model(8, 16, 3), adam_dropout_config(1));
  try {
    ts.save_checkpoint(dir + "/ck.onyx");
    ADD_FAILURE() << "saved over a folder";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("renaming '" + dir + "/.ck.onyx.tmp-"), std::string::npos) << what;
    EXPECT_NE(what.find(std::strerror(EISDIR)), std::string::npos) << what;
  }
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"ck.onyx"});
  std::filesystem::remove_all(dir);
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

namespace {

/// A checkpoint file around `header` (JSON text) and `data`, correctly summed, as another
/// program (or a modified file re-summed) could write it.
std::string summed_checkpoint(const std::string& header, const std::string& data,
                              std::optional<uint64_t> header_length = std::nullopt) {
  std::string b = "ONYXCKPT";
  uint32_t version = 1;
  uint64_t hl = header_length.value_or(header.size());
  b.append(reinterpret_cast<const char*>(&version), sizeof version);
  b.append(reinterpret_cast<const char*>(&hl), sizeof hl);
  b += header + data;
  uint64_t h = fnv1a(b.data(), b.size());
  b.append(reinterpret_cast<const char*>(&h), sizeof h);
  return b;
}

std::string error_of(const std::string& bytes) {
  try {
    training::parse_checkpoint(bytes, "x.ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

// Found by tests/fuzz/fuzz_checkpoint.cpp: a header that passes the checksum is still checked
// field by field, before anything is allocated, and every failure is an onyx::Error (a
// JSON library exception, a wrapped-around length or a 4 TB allocation before).
TEST(Checkpoint, SummedButInconsistentHeadersAreRefusedBeforeAllocation) {
  const std::string t = R"({"meta":{},"tensors":[{"name":"w","dtype":1,"shape":[2],"offset":0,"bytes":8}]})";
  const std::string data(8, '\0');
  ASSERT_EQ(training::parse_checkpoint(summed_checkpoint(t, data), "ok").tensors.size(), 1u);

  EXPECT_NE(error_of(summed_checkpoint(t, data, ~uint64_t{0} - 4)).find("header length"), std::string::npos);
  EXPECT_NE(error_of(summed_checkpoint("[1,2]", "")).find("not an object"), std::string::npos);
  EXPECT_NE(error_of(summed_checkpoint(R"({"meta":1,"tensors":{}})", "")).find("'tensors' array"),
            std::string::npos);
  auto entry = [&](const std::string& fields) {
    return error_of(summed_checkpoint(R"({"meta":{},"tensors":[{)" + fields + "}]}", data));
  };
  EXPECT_NE(entry(R"("dtype":1,"shape":[2],"offset":0,"bytes":8)").find("'name'"), std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":99,"shape":[2],"offset":0,"bytes":8)").find("dtype code 99"),
            std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":8,"shape":[2],"offset":0,"bytes":8)").find("dtype code 8"),
            std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":1,"shape":[-2],"offset":0,"bytes":8)").find("dimension -2"),
            std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":1,"shape":"x","offset":0,"bytes":8)").find("'shape'"), std::string::npos);
  // 10^12 floats declared over 8 bytes: refused by arithmetic, not by a failed 4 TB allocation.
  EXPECT_NE(entry(R"("name":"w","dtype":1,"shape":[1000000000000],"offset":0,"bytes":8)").find("has 8 bytes"),
            std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":1,"shape":[2],"offset":18446744073709551615,"bytes":8)")
                .find("lies outside"),
            std::string::npos);
  EXPECT_NE(entry(R"("name":"w","dtype":1,"shape":[2],"offset":4,"bytes":18446744073709551614)")
                .find("lies outside"),
            std::string::npos);
}

// A checkpoint whose header parses but whose metadata is not a training session's.
TEST(Checkpoint, MalformedTrainingMetadataIsAnOnyxError) {
  TrainingSession ts(mlp_model(8, 16, 3), adam_dropout_config(1));
  std::string path = tmp_path("meta");
  auto load_with_meta = [&](const std::string& meta) -> std::string {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        << summed_checkpoint(R"({"meta":)" + meta + R"(,"tensors":[]})", "");
    try {
      ts.load_checkpoint(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(load_with_meta("[1]").find("not a training checkpoint"), std::string::npos);
  EXPECT_NE(load_with_meta(R"({"format":"onyx-training"})").find("'params'"), std::string::npos);
  nlohmann::json meta = {{"format", "onyx-training"}, {"params", nlohmann::json::array()},
                         {"optimizer", "adamw"}, {"micro", "three"}, {"seed", 1}};
  EXPECT_NE(load_with_meta(meta.dump()).find("'micro'"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace onyx::test
