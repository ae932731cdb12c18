// A file mapped into memory, for loading models and their weights without reading them into a
// copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace onyx {

/// Maps a whole file, private: read-only with its pages prefaulted in one call (a fault per 4
/// KiB page costs 2-20 us on our VMs), or copy-on-write with its pages left to fault where
/// they are read (mapped_file.cpp says why). What cannot be mapped (a pipe, a device, some file
/// systems) is read instead. Move-only; unmapped when destroyed. Errors name the file.
class MappedFile {
 public:
  enum class Access {
    ReadOnly,     ///< parsed and copied from, never written
    CopyOnWrite,  ///< tensors live in it: a write makes a private copy of its page, never
                  ///< reaching the file (a write to a read-only mapping would be SIGSEGV)
  };
  /// `what` prefixes errors ("load", "external data").
  MappedFile(const std::string& path, const char* what, Access access = Access::ReadOnly);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const {
    return data_ ? std::string_view(static_cast<const char*>(data_), size_) : std::string_view(read_);
  }
  /// The bytes, for tensors that live in them (Access::CopyOnWrite, or a file that was read);
  /// read-only mappings are only read through it.
  char* writable_data() { return data_ ? static_cast<char*>(data_) : read_.data(); }
  /// Whether `p` points into the mapping.
  bool holds(const void* p) const;
  /// Access::CopyOnWrite: an onyx::Error naming the file when it was truncated or written since
  /// it was mapped (its size or modification time differ): a page not yet read would then be
  /// SIGBUS past the new end, or the new bytes mixed with the old. One fstat.
  void check_unchanged(const char* who) const;

 private:
  void* data_ = nullptr;  // the mapping, or nullptr when the bytes were read into read_
  size_t size_ = 0;
  std::string read_;
  std::string path_;
  int fd_ = -1;  // Access::CopyOnWrite: kept open to see the file change under the mapping
  int64_t mtime_ns_ = 0;
};

/// Copy-on-write mappings that tensors live in, registered by the loader so that a session can
/// find the files its constants are read from (weak: a mapping lives as long as its tensors).
void register_tensor_mapping(const std::shared_ptr<MappedFile>& file);
/// The registered mappings that hold any of `ptrs` (each once).
std::vector<std::shared_ptr<const MappedFile>> tensor_mappings_holding(
    const std::vector<const void*>& ptrs);

}  // namespace onyx
