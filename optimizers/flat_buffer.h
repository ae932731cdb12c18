// FlatBuffer: all parameters (or all gradients) of a model in one contiguous float32 tensor,
// each at a 64-byte-aligned offset, with per-parameter views sharing the storage. Optimizers
// and gradient buckets run over the flat range; graphs read and write the views.
//
//   FlatBuffer params({{"fc.weight", {16, 8}}, {"fc.bias", {16}}});
//   Tensor w = params.view("fc.weight");   // float [16, 8], aliases params.data()
//   auto opt = make_optimizer(config, params.segments());
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/tensor.h"
#include "optimizers/optimizer.h"

namespace onyx::optim {

class FlatBuffer {
 public:
  /// Elements per alignment unit: segments start at multiples of 16 floats (64 bytes).
  static constexpr int64_t kAlignElems = 16;

  FlatBuffer() = default;
  /// One zero-filled allocation for all entries, laid out in the given order. onyx::Error
  /// "[FlatBuffer] ..." on a duplicate name or a negative dimension.
  explicit FlatBuffer(const std::vector<std::pair<std::string, Shape>>& entries);

  /// The tensor of entry `name` (or entry i), sharing this buffer's storage.
  /// onyx::Error on an unknown name or an index out of range.
  Tensor view(const std::string& name) const;
  Tensor view(size_t i) const;
  /// Segment per entry (decay = true; callers clear it for biases and norm scales).
  const std::vector<ParamSegment>& segments() const { return segments_; }
  size_t num_entries() const { return segments_.size(); }

  float* data() { return storage_.numel() ? storage_.data<float>() : nullptr; }
  const float* data() const { return storage_.numel() ? storage_.data<float>() : nullptr; }
  /// Total elements including alignment padding (padding stays zero unless written through
  /// data()).
  int64_t size() const { return storage_.numel(); }
  /// The whole buffer as one float [size()] tensor.
  const Tensor& tensor() const { return storage_; }
  /// Sets every element to 0 (in parallel; the allocation is kept).
  void zero(int threads = 1);

 private:
  Tensor storage_;
  std::vector<ParamSegment> segments_;
  std::vector<Shape> shapes_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace onyx::optim
