// A file mapped read-only into memory, for loading models without reading them into a copy.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace onyx {

/// Maps a whole file read-only (private, pages prefaulted in one call: a fault per 4 KiB page
/// costs 15-20 us on our VMs). Move-only; unmapped when destroyed. Errors name the file.
class MappedFile {
 public:
  /// `what` prefixes errors ("load", "external data").
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace onyx
