// FNV-1a, the one byte hash onyx uses for checksums and fingerprints (checkpoint files,
// "every rank holds the same weights" checks). Not cryptographic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace onyx {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

/// Hash of `n` bytes at `p`, continuing from `h` (chain calls to hash several pieces).
inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace onyx
