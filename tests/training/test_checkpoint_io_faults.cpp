// Checkpoint saves when the file system reports an error that a full disk does not produce:
// fsync or close of the temporary failing with EIO (a dying disk, a lost NFS server, delayed
// allocation running out of space), and the folder's fsync after the rename. The faults are
// injected by interposing fsync() and close() in this test binary: the checkpoint writer
// (statically linked into it) calls these definitions, which pass through to the C library
// unless a test armed a fault for a file whose path contains a given text.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "training/training_session.h"
#include "training_models.h"

namespace {

struct Fault {
  std::mutex mu;
  std::string call;       // "fsync" or "close"
  std::string path_part;  // fails only for a descriptor whose path contains this ("=P": is P)
  int error = 0;
  int hits = 0;
};
Fault& fault() {
  static Fault f;
  return f;
}

std::string fd_path(int fd) {
  char buf[4096];
  ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

/// The errno armed for `call` on `fd`, or 0 (and counts the hit).
int armed(const char* call, int fd) {
  Fault& f = fault();
  std::lock_guard<std::mutex> lock(f.mu);
  if (f.error == 0 || f.call != call) return 0;
  const std::string p = fd_path(fd);
  const bool match = f.path_part.rfind('=', 0) == 0 ? p == f.path_part.substr(1)
                                                    : p.find(f.path_part) != std::string::npos;
  if (!match) return 0;
  ++f.hits;
  return f.error;
}

}  // namespace

extern "C" int fsync(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(::dlsym(RTLD_NEXT, "fsync"));
  if (int e = armed("fsync", fd)) {
    errno = e;
    return -1;
  }
  return real(fd);
}

extern "C" int close(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(::dlsym(RTLD_NEXT, "close"));
  if (int e = armed("close", fd)) {
    real(fd);  // Linux releases the descriptor even when close reports an error
    errno = e;
    return -1;
  }
  return real(fd);
}

namespace onyx::test {
namespace {

class ArmFault {
 public:
  ArmFault(const std::string& call, const std::string& path_part, int error) {
    std::lock_guard<std::mutex> lock(fault().mu);
    fault().call = call;
    fault().path_part = path_part;
    fault().error = error;
    fault().hits = 0;
  }
  ~ArmFault() {
    std::lock_guard<std::mutex> lock(fault().mu);
    fault().error = 0;
  }
  int hits() {
    std::lock_guard<std::mutex> lock(fault().mu);
    return fault().hits;
  }
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TrainingConfig config() {
  TrainingConfig c;
  c.optimizer = {.name = "adamw", .lr = 0.01};
  c.seed = 3;
  c.threads = 1;
  return c;
}

struct Scratch {
  std::string dir = (std::filesystem::temp_directory_path() / ("onyx_ckpt_faults_" + std::to_string(::getpid())))
                        .string();
  Scratch() { std::filesystem::create_directories(dir); }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

// fsync or close of the temporary fails: the save is an onyx::Error naming the call, the file
// and the reason; the previous checkpoint is untouched, no temporary is left, and the same
// session saves again once the fault is gone.
TEST(CheckpointFaults, FailedFsyncOrCloseOfTheTemporaryKeepsThePreviousCheckpoint) {
  for (const char* call : {"fsync", "close"}) {
    SCOPED_TRACE(call);
    Scratch s;
    const std::string path = s.dir + "/ck.onyx";
    TrainingSession ts(mlp_model(8, 16, 3), config());
    ts.train_step(class_batch(8, 8, 3, 1));
    ts.save_checkpoint(path);
    const std::string before = bytes_of(path);
    ts.train_step(class_batch(8, 8, 3, 2));
    {
      ArmFault arm(call, "/.ck.onyx.tmp-", EIO);
      try {
        ts.save_checkpoint(path);
        ADD_FAILURE() << "the save succeeded although " << call << " failed";
      } catch (const Error& e) {
        const std::string what = e.what();
        const std::string verb = std::string(call) == "fsync" ? "fsync of '" : "closing '";
        EXPECT_EQ(what.rfind("[checkpoint] saving '" + path + "' failed: " + verb + s.dir + "/.ck.onyx.tmp-", 0), 0u)
            << what;
        EXPECT_NE(what.find(std::strerror(EIO)), std::string::npos) << what;
      }
      EXPECT_EQ(arm.hits(), 1);
    }
    EXPECT_EQ(names_in(s.dir), std::vector<std::string>{"ck.onyx"}) << "a temporary was left behind";
    EXPECT_EQ(bytes_of(path), before);
    TrainingSession check(mlp_model(8, 16, 3), config());
    check.load_checkpoint(path);
    EXPECT_EQ(check.step(), 1);
    ts.save_checkpoint(path);
    check.load_checkpoint(path);
    EXPECT_EQ(check.step(), 2);
  }
}

// The folder's fsync fails after the rename: the new checkpoint is in place and loads, and the
// error says that the rename may not be durable.
TEST(CheckpointFaults, FailedFolderFsyncIsReportedAfterTheRename) {
  Scratch s;
  const std::string path = s.dir + "/ck.onyx";
  TrainingSession ts(mlp_model(8, 16, 3), config());
  ts.train_step(class_batch(8, 8, 3, 1));
  {
    ArmFault arm("fsync", "=" + s.dir, EIO);  // the folder itself, not the files in it
    try {
      ts.save_checkpoint(path);
      ADD_FAILURE() << "the save succeeded although the folder's fsync failed";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path + "' was renamed into place, but fsync of its folder '" + s.dir + "' failed"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(std::strerror(EIO)), std::string::npos) << what;
    }
    EXPECT_EQ(arm.hits(), 1);
  }
  EXPECT_EQ(names_in(s.dir), std::vector<std::string>{"ck.onyx"});
  TrainingSession check(mlp_model(8, 16, 3), config());
  check.load_checkpoint(path);
  EXPECT_EQ(check.step(), 1);
}

}  // namespace
}  // namespace onyx::test
