// Checkpoint files: named tensors plus a JSON header, written atomically.
//
// Layout: "ONYXCKPT" magic, u32 format version, u64 header length, the JSON header
// (metadata + one entry per tensor: name, dtype, shape, offset, bytes), the tensor bytes,
// then a u64 FNV-1a checksum of everything before it. A reader checks the magic, version,
// sizes and checksum, so a truncated or corrupted file is refused with onyx::Error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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
/// file, never a half-written one. onyx::Error naming the file, the bytes attempted and the
/// system's reason when any step fails (folder not writable, disk full, file too large, I/O
/// error); the temporary is then removed and a previous `path` is left as it was.
void write_checkpoint(const std::string& path, const CheckpointData& data);

/// Writes `bytes` to `path` the same atomic way, with the same errors.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// Reads a checkpoint; onyx::Error naming the file for a missing, truncated, corrupt or
/// non-checkpoint file.
CheckpointData read_checkpoint(const std::string& path);
/// Parses the bytes of a checkpoint file; `source` names it in errors. Every length, offset,
/// dtype and shape in the header is checked against the bytes present before any tensor is
/// allocated.
CheckpointData parse_checkpoint(std::string_view bytes, const std::string& source);

}  // namespace onyx::training
