// Checkpoint bytes -> training::parse_checkpoint. A mutated file nearly always fails the
// checksum, so for inputs whose first byte is odd the harness re-sums the rest (FNV-1a over
// everything but the last 8 bytes, as write_checkpoint does) to reach the header and tensor
// checks behind it. Seeds: tests/fuzz/seeds/checkpoint.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.h"
#include "graph/hash.h"
#include "training/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(onyx::fuzz::bytes_of(data + 1, size - 1));
  if ((data[0] & 1) && bytes.size() >= 8) {
    uint64_t h = onyx::fnv1a(bytes.data(), bytes.size() - 8);
    std::memcpy(bytes.data() + bytes.size() - 8, &h, 8);
  }
  try {
    onyx::training::CheckpointData d = onyx::training::parse_checkpoint(bytes, "fuzz.ckpt");
    for (const auto& [name, t] : d.tensors)
      if (t.numel() > 0 && t.raw() == nullptr) std::abort();
  } catch (const onyx::Error&) {
  }
  return 0;
}
