// A file mapped read-only into memory, for loading models without reading them into a copy.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace onyx {

/// Maps a whole file read-only (private, pages prefaulted in one call: a fault per 4 KiB page
/// costs 15-20 us on our VMs); what cannot be mapped (a pipe, a device, some file systems) is
/// read instead. Move-only; unmapped when destroyed. Errors name the file.
class MappedFile {
 public:
  /// `what` prefixes errors ("load", "external data").
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const {
    return data_ ? std::string_view(static_cast<const char*>(data_), size_) : std::string_view(read_);
  }

 private:
  void* data_ = nullptr;  // the mapping, or nullptr when the bytes were read into read_
  size_t size_ = 0;
  std::string read_;
};

}  // namespace onyx
