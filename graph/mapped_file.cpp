#include "graph/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "graph/error.h"

namespace onyx {

MappedFile::MappedFile(const std::string& path, const char* what, Access access) {
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
    // full copy of the file): those pages are populated for reading instead.
    const bool cow = access == Access::CopyOnWrite;
    data_ = ::mmap(nullptr, size_, cow ? PROT_READ | PROT_WRITE : PROT_READ,
                   cow ? MAP_PRIVATE : MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (data_ != MAP_FAILED) {
#ifdef MADV_POPULATE_READ
      constexpr int kPopulateRead = MADV_POPULATE_READ;
#else
      constexpr int kPopulateRead = 22;  // Linux 5.14's value; older libc headers lack the name
#endif
      // Advice only: an older kernel (EINVAL) leaves the pages to fault at first read.
      if (cow) ::madvise(data_, size_, kPopulateRead);
      ::close(fd);  // the mapping keeps the file open
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
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), read_(std::move(o.read_)) {}

}  // namespace onyx
