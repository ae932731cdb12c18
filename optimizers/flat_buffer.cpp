#include "optimizers/flat_buffer.h"

#include <cstring>

#include "graph/error.h"
#include "kernels/parallel.h"

namespace onyx::optim {

FlatBuffer::FlatBuffer(const std::vector<std::pair<std::string, Shape>>& entries) {
  int64_t offset = 0;
  for (const auto& [name, shape] : entries) {
    for (int64_t d : shape)
      ONYX_CHECK(d >= 0, "[FlatBuffer] entry '{}' should have dims >= 0 but has shape {}", name,
                 shape_str(shape));
    ONYX_CHECK(index_.emplace(name, segments_.size()).second,
               "[FlatBuffer] entry '{}' is given twice", name);
    const int64_t size = shape_numel(shape);
    segments_.push_back({name, offset, size, true});
    shapes_.push_back(shape);
    offset += (size + kAlignElems - 1) / kAlignElems * kAlignElems;
  }
  storage_ = Tensor::zeros(DataType::Float, {offset});
}

Tensor FlatBuffer::view(size_t i) const {
  ONYX_CHECK(i < segments_.size(), "[FlatBuffer] entry index {} is out of range (there are {})", i,
             segments_.size());
  return Tensor(DataType::Float, shapes_[i], storage_.storage(),
                storage_.offset() + static_cast<size_t>(segments_[i].offset) * sizeof(float));
}

Tensor FlatBuffer::view(const std::string& name) const {
  auto it = index_.find(name);
  ONYX_CHECK(it != index_.end(), "[FlatBuffer] no entry named '{}' (there are {})", name,
             segments_.size());
  return view(it->second);
}

void FlatBuffer::zero(int threads) {
  float* p = data();
  parallel_for(size(), threads, 1 << 16, [&](int64_t b, int64_t e) {
    std::memset(p + b, 0, static_cast<size_t>(e - b) * sizeof(float));
  });
}

}  // namespace onyx::optim
