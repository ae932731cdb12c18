// Training data for `onyx train`: a folder holding one .npy file per batch input.
//
//   DIR/x.npy        float32 [N, ...]   one file per model input, named after the input
//   DIR/labels.npy   int64 [N]          the loss's labels (class indices for cross-entropy)
//
// The first axis of every array counts samples and must be the same everywhere. A '/' or '\'
// in an input name becomes '_' in its file name. Each file is read in the dtype the training
// graph declares for that input (npy.h's conventions), so float64 pixels or int32 labels are
// refused with an error naming the file, the input and both dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "inference/session.h"

namespace onyx::cli {

/// A batch input the data must provide: its name and declared type.
struct DataInput {
  std::string name;
  ValueType type;
};

/// Whole arrays of a data folder.
struct Dataset {
  std::string dir;
  std::vector<std::string> names;  // file names ("x.npy") as read; input names once bound
  std::vector<Tensor> arrays;      // arrays[i].shape()[0] == samples
  int64_t samples = 0;
};

/// "x" -> "x.npy"; "a/b" -> "a_b.npy".
std::string npy_file_name(const std::string& input);

/// Reads every .npy file of `dir` in the dtype the file declares. onyx::Error naming `flag`
/// (e.g. "--data") and the folder for a missing folder, a folder without .npy files, an array
/// without a sample axis, or sample counts that differ between files.
Dataset load_npy_folder(const std::string& dir, const std::string& flag);

/// `t` (read from `file`) converted to the dtype `in` declares (npy.h's conventions); onyx::Error
/// naming the file, the input and both dtypes or shapes when the dtype or a fixed per-sample
/// dimension differs.
Tensor check_for_input(Tensor t, const DataInput& in, const std::string& file);

/// Rows order[begin, end) of every array, as a batch by input name.
NamedTensors gather_batch(const Dataset& data, const std::vector<int64_t>& order, int64_t begin,
                          int64_t end);

/// The sample order of epoch `epoch` (0-based): 0..n-1, or, when `shuffle`, a permutation drawn
/// from a generator seeded with (seed, epoch), so any epoch can be recreated on its own (a
/// resumed run continues exactly where it stopped). The same on every platform.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace onyx::cli
