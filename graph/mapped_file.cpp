#include "graph/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "graph/error.h"

namespace onyx {

namespace {

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const char* what, Access access) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ONYX_CHECK(fd >= 0, "[{}] {}: '{}'", what,
             errno == ENOENT ? std::string("file not found") : std::strerror(errno), path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    ONYX_THROW("[{}] cannot read the size of '{}': {}", what, path, std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    ONYX_THROW("[{}] '{}' is a folder, not a file", what, path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (S_ISREG(st.st_mode) && size_ > 0) {
    // MAP_POPULATE would break copy-on-write for every page of a writable private mapping (a
    // full copy of the file). Its pages are not populated either: the threads that pack the
    // weights fault them in parallel (16 pages a fault, the kernel's fault-around), and pages no
    // one reads (most of an embedding table) stay unmapped; MADV_POPULATE_READ on the loading
    // thread took 35-40 ms of BERT-base's 60 ms read and saved no time later. MADV_WILLNEED
    // starts reading a file that is not in the page cache without waiting for it.
    const bool cow = access == Access::CopyOnWrite;
    data_ = ::mmap(nullptr, size_, cow ? PROT_READ | PROT_WRITE : PROT_READ,
                   cow ? MAP_PRIVATE : MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (data_ != MAP_FAILED) {
      if (cow) {
        ::madvise(data_, size_, MADV_WILLNEED);  // advice only
        fd_ = fd;  // check_unchanged() asks it
        mtime_ns_ = mtime_ns(st);
      } else {
        ::close(fd);  // the mapping keeps the file open
      }
      return;
    }
    data_ = nullptr;
  }
  // A pipe, a device, or a file system that cannot map: read it.
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      ONYX_THROW("[{}] cannot read '{}': {}", what, path, std::strerror(e));
    }
    read_.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_ = read_.size();
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      read_(std::move(o.read_)),
      path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      mtime_ns_(o.mtime_ns_) {}

bool MappedFile::holds(const void* p) const {
  const auto* c = static_cast<const char*>(p);
  const std::string_view b = bytes();
  return !b.empty() && c >= b.data() && c < b.data() + b.size();
}

void MappedFile::check_unchanged(const char* who) const {
  if (fd_ < 0) return;  // read into memory, or read-only and done with
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return;  // cannot tell; the mapping itself is still there
  const auto size = static_cast<size_t>(st.st_size);
  ONYX_CHECK(size == size_ && mtime_ns(st) == mtime_ns_,
             "[{}] the external data file '{}' was {} since it was loaded ({} -> {} bytes): its "
             "weights are read from the file's mapping, where a truncated page is a crash and a "
             "rewritten one a mix of old and new weights. Create the session again, write new "
             "exports to a new path, or load with map_external_data = false (LoadOptions; Python "
             "SessionOptions) to copy the weights",
             who, path_, size < size_ ? "truncated" : "written", size_, size);
}

namespace {

std::mutex registry_mu;
std::vector<std::weak_ptr<MappedFile>> registry;

}  // namespace

void register_tensor_mapping(const std::shared_ptr<MappedFile>& file) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.erase(std::remove_if(registry.begin(), registry.end(),
                                [](const std::weak_ptr<MappedFile>& w) { return w.expired(); }),
                 registry.end());
  registry.push_back(file);
}

std::vector<std::shared_ptr<const MappedFile>> tensor_mappings_holding(
    const std::vector<const void*>& ptrs) {
  std::vector<std::shared_ptr<const MappedFile>> out;
  std::lock_guard<std::mutex> lock(registry_mu);
  for (const auto& w : registry) {
    auto f = w.lock();
    if (f && std::any_of(ptrs.begin(), ptrs.end(), [&](const void* p) { return f->holds(p); }))
      out.push_back(std::move(f));
  }
  return out;
}

}  // namespace onyx
