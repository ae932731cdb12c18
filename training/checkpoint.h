// Checkpoint files: named tensors plus a JSON header, written atomically.
//
// Layout: "ONYXCKPT" magic, u32 format version, u64 header length, the JSON header
// (metadata + one entry per tensor: name, dtype, shape, offset, bytes), the tensor bytes,
// then a u64 FNV-1a checksum of everything before it. A reader checks the magic, version,
// sizes and checksum, so a truncated or corrupted file is refused with onyx::Error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "graph/tensor.h"

namespace onyx::training {

struct CheckpointData {
  nlohmann::json meta;                                  // step, config, fingerprint, ...
  std::vector<std::pair<std::string, Tensor>> tensors;  // parameters, optimizer state, ...
};

/// Writes `data` to `path` through a temporary file in the same folder that is fsynced and
/// then renamed over `path` (and the folder fsynced), so readers see the old or the new
/// file, never a half-written one. onyx::Error when the folder is not writable.
void write_checkpoint(const std::string& path, const CheckpointData& data);

/// Reads a checkpoint; onyx::Error naming the file for a missing, truncated, corrupt or
/// non-checkpoint file.
CheckpointData read_checkpoint(const std::string& path);

}  // namespace onyx::training
