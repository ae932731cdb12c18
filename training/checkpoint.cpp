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


/// Writes all of `n` bytes or throws.
void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    ONYX_CHECK(w > 0, "[checkpoint] writing '{}' failed: {}", path, std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

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
  std::filesystem::path target(path);
  std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  std::string tmp = (dir / fmt::format(".{}.tmp-{}", target.filename().string(), ::getpid())).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ONYX_CHECK(fd >= 0, "[checkpoint] cannot create '{}': {}", tmp, std::strerror(errno));
  try {
    uint64_t h = fnv1a(kMagic, sizeof kMagic);
    auto put = [&](const void* p, size_t n) {
      write_all(fd, p, n, tmp);
      h = fnv1a(p, n, h);
    };
    write_all(fd, kMagic, sizeof kMagic, tmp);
    put(&kVersion, sizeof kVersion);
    uint64_t hl = head.size();
    put(&hl, sizeof hl);
    put(head.data(), head.size());
    for (const auto& [name, t] : data.tensors) put(t.raw(), t.nbytes());
    write_all(fd, &h, sizeof h, tmp);
    ONYX_CHECK(::fsync(fd) == 0, "[checkpoint] fsync of '{}' failed: {}", tmp, std::strerror(errno));
    ::close(fd);
    fd = -1;
    ONYX_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "[checkpoint] renaming '{}' to '{}' failed: {}",
               tmp, path, std::strerror(errno));
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // makes the rename itself durable
      ::close(dfd);
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

CheckpointData read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "[checkpoint] cannot open '{}': {}", path, std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t fixed = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t);
  ONYX_CHECK(bytes.size() >= fixed + sizeof(uint64_t) && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
             "[checkpoint] '{}' is not an onyx checkpoint (bad magic or too short: {} bytes)", path,
             bytes.size());
  uint32_t version;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  ONYX_CHECK(version == kVersion, "[checkpoint] '{}' has format version {}, this build reads {}", path,
             version, kVersion);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  uint64_t h = fnv1a(bytes.data(), bytes.size() - sizeof stored);
  ONYX_CHECK(h == stored, "[checkpoint] '{}' is corrupt (checksum mismatch; truncated or modified)", path);
  uint64_t hl;
  std::memcpy(&hl, bytes.data() + sizeof kMagic + sizeof version, sizeof hl);
  ONYX_CHECK(fixed + hl + sizeof stored <= bytes.size(), "[checkpoint] '{}' is corrupt (header length)", path);
  CheckpointData out;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(fixed, hl));
  } catch (const std::exception& e) {
    ONYX_THROW("[checkpoint] '{}' has a malformed header: {}", path, e.what());
  }
  out.meta = header.at("meta");
  const size_t data_begin = fixed + hl;
  const size_t data_size = bytes.size() - sizeof stored - data_begin;
  for (const auto& e : header.at("tensors")) {
    auto dt = static_cast<DataType>(e.at("dtype").get<int>());
    Shape shape = e.at("shape").get<Shape>();
    uint64_t off = e.at("offset"), n = e.at("bytes");
    ONYX_CHECK(off + n <= data_size, "[checkpoint] '{}' is corrupt: tensor '{}' lies outside the file", path,
               e.at("name").get<std::string>());
    Tensor t = Tensor::empty(dt, shape);
    ONYX_CHECK(t.nbytes() == n, "[checkpoint] '{}' is corrupt: tensor '{}' has {} bytes for shape {}", path,
               e.at("name").get<std::string>(), n, shape_str(shape));
    std::memcpy(t.raw(), bytes.data() + data_begin + off, n);
    out.tensors.emplace_back(e.at("name").get<std::string>(), std::move(t));
  }
  return out;
}

}  // namespace onyx::training
