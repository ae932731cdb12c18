// Shared by the libFuzzer targets: what counts as a finding.
//
// onyx promises an onyx::Error (naming what was expected and what was found) for every bad
// input. A target therefore catches onyx::Error only; any other exception escapes
// LLVMFuzzerTestOneInput, libFuzzer reports it as a crash ("deadly signal" after
// std::terminate) and keeps the input, like a sanitizer report, a timeout or an allocation
// above -malloc_limit_mb.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "graph/error.h"

namespace onyx::fuzz {

inline std::string_view bytes_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// A scratch file for parsers that read paths (one per process, rewritten per input) under
/// $TMPDIR or /tmp.
inline const std::string& scratch_path(const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/onyx_fuzz_" + std::to_string(::getpid()) + suffix;
  }();
  static const struct Remove {
    ~Remove() { std::remove(path.c_str()); }
  } remove_at_exit;
  return path;
}

/// Writes `bytes` to the scratch file and returns its path.
inline const std::string& write_scratch(std::string_view bytes, const char* suffix) {
  const std::string& path = scratch_path(suffix);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();  // the harness's own failure, not onyx's
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace onyx::fuzz
