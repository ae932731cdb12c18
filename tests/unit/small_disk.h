// Disk-full tests: a body runs in a forked child in which one folder is a small disk that the
// body can fill. As root (here and in CI) the folder becomes a tmpfs in a private mount
// namespace and writes fail with ENOSPC; where mounting is not permitted (EPERM: an
// unprivileged container) the child's file-size limit stands in and writes fail with EFBIG
// (SIGXFSZ ignored). Either way the failure path runs; nothing is skipped.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace onyx::test {

class SmallDisk {
 public:
  enum class Kind { Tmpfs, FileSizeLimit };

  /// Mounts a tmpfs of `bytes` over `dir`, or falls back to the file-size limit on EPERM.
  /// Call only in a forked child: the mount namespace and the limit are the process's own.
  SmallDisk(std::string dir, size_t bytes) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    const std::string opts = fmt::format("size={}", bytes);
    if (::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
        ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      kind_ = Kind::Tmpfs;
      return;
    }
    if (errno != EPERM)
      throw std::runtime_error(fmt::format("cannot mount a tmpfs on '{}': {}", dir_, std::strerror(errno)));
    kind_ = Kind::FileSizeLimit;
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
  }

  Kind kind() const { return kind_; }
  const std::string& dir() const { return dir_; }
  /// What a write that did not fit reports.
  std::string reason() const { return std::strerror(kind_ == Kind::Tmpfs ? ENOSPC : EFBIG); }
  /// The file fill() uses on the tmpfs; not part of what a test wrote.
  static const char* filler_name() { return ".filler"; }

  /// Leaves room for about `bytes` more: on the tmpfs that many bytes in whole pages in all,
  /// under the file-size limit files of at most `bytes`.
  void fill(size_t bytes) {
    if (kind_ == Kind::FileSizeLimit) return set_limit(bytes);
    std::string path = dir_ + "/" + filler_name();
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
    std::vector<char> block(1 << 16, 'f');
    for (;;) {
      ssize_t w = ::write(fd, block.data(), block.size());
      if (w > 0 || (w < 0 && errno == EINTR)) continue;
      if (w < 0 && errno == ENOSPC) break;
      ::close(fd);
      throw std::runtime_error(fmt::format("filling '{}': {}", path, std::strerror(errno)));
    }
    // Every page is taken now; give back whole pages from the end (a size past the last
    // written byte is a hole that takes none).
    struct stat st{};
    ::fstat(fd, &st);
    const off_t page = ::sysconf(_SC_PAGESIZE), pages = (static_cast<off_t>(bytes) + page - 1) / page;
    const off_t end = (st.st_size + page - 1) / page * page;
    int rc = ::ftruncate(fd, std::max<off_t>(0, end - pages * page));
    ::close(fd);
    if (rc != 0) throw std::runtime_error(fmt::format("truncating '{}': {}", path, std::strerror(errno)));
  }

  /// Undoes fill().
  void free() {
    if (kind_ == Kind::Tmpfs) {
      std::filesystem::remove(dir_ + "/" + filler_name());
    } else {
      set_limit(RLIM_INFINITY);
    }
  }

 private:
  static void set_limit(rlim_t bytes) {
    rlimit r{};
    ::getrlimit(RLIMIT_FSIZE, &r);
    r.rlim_cur = std::min(bytes, r.rlim_max);  // an unprivileged process keeps its hard limit
    if (::setrlimit(RLIMIT_FSIZE, &r) != 0)
      throw std::runtime_error(fmt::format("setrlimit(RLIMIT_FSIZE): {}", std::strerror(errno)));
  }

  std::string dir_;
  Kind kind_ = Kind::Tmpfs;
};

/// What a body run on a small disk returned, or why it did not return.
struct SmallDiskResult {
  SmallDisk::Kind kind = SmallDisk::Kind::Tmpfs;
  std::string text;   // the body's return value
  std::string error;  // empty when the body returned; else its exception or how the child ended
};

/// Runs `body` in a forked child in which `dir` is a SmallDisk of `bytes`; the body's result
/// comes back through a pipe. Fork before any OpenMP pool has run (libgomp is not fork-safe).
inline SmallDiskResult on_small_disk(const std::string& dir, size_t bytes,
                                     const std::function<std::string(SmallDisk&)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {SmallDisk::Kind::Tmpfs, "", fmt::format("pipe: {}", std::strerror(errno))};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    // The first byte says how the disk was made, the second whether the body returned.
    std::string out = "T+";
    try {
      SmallDisk disk(dir, bytes);
      out[0] = disk.kind() == SmallDisk::Kind::Tmpfs ? 'T' : 'L';
      out += body(disk);
    } catch (const std::exception& e) {
      out[1] = '!';
      out += e.what();
    }
    for (size_t done = 0; done < out.size();) {
      ssize_t w = ::write(fds[1], out.data() + done, out.size() - done);
      if (w <= 0) ::_exit(3);
      done += static_cast<size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) in.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  SmallDiskResult r;
  if (in.size() < 2 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    r.error = fmt::format("the child ended with status {:#x} after sending {} bytes", status, in.size());
    return r;
  }
  r.kind = in[0] == 'T' ? SmallDisk::Kind::Tmpfs : SmallDisk::Kind::FileSizeLimit;
  (in[1] == '+' ? r.text : r.error) = in.substr(2);
  return r;
}

}  // namespace onyx::test
