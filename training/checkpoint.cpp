#include "training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "graph/hash.h"

namespace onyx::training {

namespace {

constexpr char kMagic[8] = {'O', 'N', 'Y', 'X', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;

/// A file written through a temporary beside it and renamed into place by commit(). Every
/// failing call (write, fsync, close, rename; ENOSPC, EFBIG, EIO, ...) throws onyx::Error naming
/// the file, the bytes attempted and the system's reason; an uncommitted temporary is removed,
/// so a failed save leaves only the previous file.
class AtomicFile {
 public:
  AtomicFile(std::string path, uint64_t total) : path_(std::move(path)), total_(total) {
    std::filesystem::path target(path_);
    dir_ = target.has_parent_path() ? target.parent_path().string() : ".";
    tmp_ = (std::filesystem::path(dir_) / fmt::format(".{}.tmp-{}", target.filename().string(), ::getpid())).string();
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ONYX_CHECK(fd_ >= 0, "[checkpoint] cannot create '{}' to save '{}': {}", tmp_, path_, std::strerror(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      // A write of 0 bytes for n > 0 has no errno; report it as the disk being full.
      const char* why = w < 0 ? std::strerror(errno) : "no bytes written (disk full?)";
      ONYX_CHECK(w > 0, "[checkpoint] saving '{}' failed: writing {} bytes at offset {} of {} to '{}': {}", path_,
                 n, written_, total_, tmp_, why);
      p += w;
      n -= static_cast<size_t>(w);
      written_ += static_cast<uint64_t>(w);
    }
  }

  void commit() {
    // Delayed allocation (NFS, ext4 without space reserved) can report ENOSPC only here.
    ONYX_CHECK(::fsync(fd_) == 0, "[checkpoint] saving '{}' failed: fsync of '{}' ({} bytes): {}", path_, tmp_,
               written_, std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    // On Linux the descriptor is released even when close fails, EINTR included.
    ONYX_CHECK(::close(fd) == 0 || errno == EINTR, "[checkpoint] saving '{}' failed: closing '{}' ({} bytes): {}",
               path_, tmp_, written_, std::strerror(errno));
    ONYX_CHECK(std::rename(tmp_.c_str(), path_.c_str()) == 0,
               "[checkpoint] saving '{}' failed: renaming '{}' ({} bytes) over it: {}", path_, tmp_, written_,
               std::strerror(errno));
    committed_ = true;
    // Makes the rename itself durable; file systems without directory fsync say EINVAL.
    int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ONYX_CHECK(dfd >= 0, "[checkpoint] '{}' was renamed into place, but its folder '{}' cannot be opened to fsync "
               "it: {}", path_, dir_, std::strerror(errno));
    int rc = ::fsync(dfd), err = errno;
    ::close(dfd);
    ONYX_CHECK(rc == 0 || err == EINVAL, "[checkpoint] '{}' was renamed into place, but fsync of its folder '{}' "
               "failed, so the rename may not survive a crash: {}", path_, dir_, std::strerror(err));
  }

 private:
  std::string path_, dir_, tmp_;
  uint64_t total_ = 0, written_ = 0;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile f(path, bytes.size());
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void write_checkpoint(const std::string& path, const CheckpointData& data) {
  nlohmann::json header = {{"meta", data.meta}, {"tensors", nlohmann::json::array()}};
  uint64_t offset = 0;
  for (const auto& [name, t] : data.tensors) {
    ONYX_CHECK(t.dtype() != DataType::String, "[checkpoint] tensor '{}' holds strings", name);
    header["tensors"].push_back({{"name", name},
                                 {"dtype", static_cast<int>(t.dtype())},
                                 {"shape", t.shape()},
                                 {"offset", offset},
                                 {"bytes", t.nbytes()}});
    offset += t.nbytes();
  }
  std::string head = header.dump();
  uint64_t hl = head.size();
  AtomicFile f(path, sizeof kMagic + sizeof kVersion + sizeof hl + hl + offset + sizeof(uint64_t));
  uint64_t h = fnv1a(kMagic, sizeof kMagic);
  auto put = [&](const void* p, size_t n) {
    f.write(p, n);
    h = fnv1a(p, n, h);
  };
  f.write(kMagic, sizeof kMagic);
  put(&kVersion, sizeof kVersion);
  put(&hl, sizeof hl);
  put(head.data(), head.size());
  for (const auto& [name, t] : data.tensors) put(t.raw(), t.nbytes());
  f.write(&h, sizeof h);
  f.commit();
}

CheckpointData read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "[checkpoint] cannot open '{}': {}", path, std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_checkpoint(bytes, path);
}

CheckpointData parse_checkpoint(std::string_view bytes, const std::string& source) {
  const size_t fixed = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t);
  ONYX_CHECK(bytes.size() >= fixed + sizeof(uint64_t) && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
             "[checkpoint] '{}' is not an onyx checkpoint (bad magic or too short: {} bytes)", source,
             bytes.size());
  uint32_t version;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  ONYX_CHECK(version == kVersion, "[checkpoint] '{}' has format version {}, this build reads {}", source,
             version, kVersion);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  uint64_t h = fnv1a(bytes.data(), bytes.size() - sizeof stored);
  ONYX_CHECK(h == stored, "[checkpoint] '{}' is corrupt (checksum mismatch; truncated or modified)", source);
  uint64_t hl;
  std::memcpy(&hl, bytes.data() + sizeof kMagic + sizeof version, sizeof hl);
  // Compared without adding to hl: a corrupt length near 2^64 must not wrap around.
  const size_t room = bytes.size() - fixed - sizeof stored;
  ONYX_CHECK(hl <= room, "[checkpoint] '{}' is corrupt (header length {} exceeds the {} bytes after it)", source,
             hl, room);
  const std::string_view data = bytes.substr(fixed + hl, room - hl);
  // Everything the header says is checked before a tensor is allocated; a header written by
  // another program (or modified and re-summed) gets an onyx::Error, never a library exception.
  auto corrupt = [&](const std::string& what) {
    return Error(fmt::format("[checkpoint] '{}' is corrupt: {}", source, what));
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(fixed, hl));
  } catch (const std::exception& e) {
    ONYX_THROW("[checkpoint] '{}' has a malformed header: {}", source, e.what());
  }
  if (!header.is_object() || !header.contains("meta") || !header.contains("tensors") ||
      !header["tensors"].is_array())
    throw corrupt("the header is not an object with 'meta' and a 'tensors' array");
  CheckpointData out;
  out.meta = header["meta"];
  for (const auto& e : header["tensors"]) {
    auto field = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) -> const nlohmann::json& {
      if (!e.is_object() || !e.contains(key) || !(e[key].*is)())
        throw corrupt(fmt::format("a tensor entry lacks a valid '{}': {}", key, e.dump().substr(0, 200)));
      return e[key];
    };
    const std::string name = field("name", &nlohmann::json::is_string).get<std::string>();
    const int64_t code = field("dtype", &nlohmann::json::is_number_integer).get<int64_t>();
    if (code < 0 || code > INT32_MAX || !dtype_is_known(static_cast<int32_t>(code)) ||
        code == static_cast<int64_t>(DataType::Undefined) || code == static_cast<int64_t>(DataType::String))
      throw corrupt(fmt::format("tensor '{}' has dtype code {}, not a numeric ONNX type", name, code));
    const auto dt = static_cast<DataType>(code);
    Shape shape;
    for (const auto& d : field("shape", &nlohmann::json::is_array)) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw corrupt(fmt::format("tensor '{}' has dimension {} in its shape", name, d.dump()));
      shape.push_back(d.get<int64_t>());
    }
    const auto off = field("offset", &nlohmann::json::is_number_unsigned).get<uint64_t>();
    const auto n = field("bytes", &nlohmann::json::is_number_unsigned).get<uint64_t>();
    if (off > data.size() || n > data.size() - off)
      throw corrupt(fmt::format("tensor '{}' ({} bytes at offset {}) lies outside the {} data bytes", name, n,
                                off, data.size()));
    const std::optional<size_t> need = checked_nbytes(dt, shape);
    if (!need || *need != n)
      throw corrupt(fmt::format("tensor '{}' has {} bytes for {} {}", name, n, dtype_name(dt), shape_str(shape)));
    Tensor t = Tensor::empty(dt, shape);
    if (n) std::memcpy(t.raw(), data.data() + off, n);
    out.tensors.emplace_back(name, std::move(t));
  }
  return out;
}

}  // namespace onyx::training
