// A file mapped into memory, for loading models and their weights without reading them into a
// copy.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace onyx {

/// Maps a whole file, private, its pages prefaulted in one call (a fault per 4 KiB page costs
/// 2-20 us on our VMs); what cannot be mapped (a pipe, a device, some file systems) is read
/// instead. Move-only; unmapped when destroyed. Errors name the file.
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
  /// The bytes, for tensors that live in them (Access::CopyOnWrite, or a file that was read).
  char* writable_data() { return data_ ? static_cast<char*>(data_) : read_.data(); }

 private:
  void* data_ = nullptr;  // the mapping, or nullptr when the bytes were read into read_
  size_t size_ = 0;
  std::string read_;
};

}  // namespace onyx
