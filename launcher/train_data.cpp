#include "launcher/train_data.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "graph/error.h"
#include "launcher/npy.h"

namespace onyx::cli {

namespace fs = std::filesystem;

std::string npy_file_name(const std::string& input) {
  std::string name = input;
  for (char& c : name)
    if (c == '/' || c == '\\') c = '_';
  return name + ".npy";
}

namespace {

std::vector<std::string> npy_files_in(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".npy") found.push_back(e.path().filename().string());
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

Dataset load_npy_folder(const std::string& dir, const std::string& flag) {
  ONYX_CHECK(fs::is_directory(dir),
             "[train] {} '{}' is not a folder; it should hold one .npy "
             "file per batch input (e.g. x.npy and labels.npy)",
             flag, dir);
  Dataset d;
  d.dir = dir;
  d.names = npy_files_in(dir);
  ONYX_CHECK(!d.names.empty(),
             "[train] {} '{}' holds no .npy files; it should hold one per "
             "batch input (e.g. x.npy and labels.npy)",
             flag, dir);
  for (const auto& name : d.names) {
    fs::path file = fs::path(dir) / name;
    Tensor t = npy::load(file.string());
    ONYX_CHECK(t.rank() >= 1, "[train] '{}' is a scalar; its first axis should count samples",
               file.string());
    if (d.arrays.empty()) d.samples = t.shape()[0];
    ONYX_CHECK(t.shape()[0] == d.samples, "[train] {} '{}': '{}' has {} samples but '{}' has {}",
               flag, dir, name, t.shape()[0], d.names[0], d.samples);
    d.arrays.push_back(std::move(t));
  }
  ONYX_CHECK(d.samples > 0, "[train] {} '{}' holds no samples (first axis 0)", flag, dir);
  return d;
}

Tensor check_for_input(Tensor t, const DataInput& in, const std::string& file) {
  ONYX_CHECK(in.type.is_tensor() && in.type.elem != DataType::String &&
                 in.type.elem != DataType::Undefined,
             "[train] the batch input '{}' is {}; onyx train feeds numeric tensors", in.name,
             in.type.str());
  t = npy::convert_for_input(std::move(t), in.type.elem, file, in.name);
  if (!in.type.shape) return t;
  const SymShape& want = *in.type.shape;
  bool ok = want.size() == t.shape().size();
  for (size_t i = 1; ok && i < want.size(); ++i)
    ok = !want[i].is_fixed() || want[i].value == t.shape()[i];
  ONYX_CHECK(ok,
             "[train] '{}' has shape {}, but the model's input '{}' is {} (first axis: "
             "samples)",
             file, shape_str(t.shape()), in.name, sym_shape_str(want));
  return t;
}

NamedTensors gather_batch(const Dataset& data, const std::vector<int64_t>& order, int64_t begin,
                          int64_t end) {
  NamedTensors batch;
  for (size_t i = 0; i < data.arrays.size(); ++i) {
    const Tensor& all = data.arrays[i];
    Shape shape = all.shape();
    shape[0] = end - begin;
    Tensor t = Tensor::empty(all.dtype(), shape);
    const size_t row = all.nbytes() / static_cast<size_t>(data.samples);
    const char* src = static_cast<const char*>(all.raw());
    char* dst = static_cast<char*>(t.raw());
    for (int64_t r = begin; r < end; ++r, dst += row)
      std::memcpy(dst, src + static_cast<size_t>(order[static_cast<size_t>(r)]) * row, row);
    batch.emplace(data.names[i], std::move(t));
  }
  return batch;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  if (!shuffle) return order;
  // mt19937_64 is specified bit for bit; std::shuffle's algorithm is not, so Fisher-Yates here.
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 rng(seq);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

}  // namespace onyx::cli
