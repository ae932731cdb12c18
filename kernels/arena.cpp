#include "kernels/arena.h"

#include <bit>
#include <limits>
#include <new>

namespace onyx {

size_t Arena::size_class(size_t bytes) {
  if (bytes <= 256) return 256;
  // Four classes per power of two: at most 25% slack.
  size_t p = std::bit_floor(bytes - 1);
  size_t step = std::max<size_t>(p / 4, 64);
  // Rounding up must not wrap around: a request this close to SIZE_MAX stays as it is and fails
  // in aligned_alloc (found by the model fuzz target: a Tile of strings asking for nearly 2^64
  // bytes was given a 1-byte block).
  if (bytes > std::numeric_limits<size_t>::max() - step) return bytes;
  return (bytes + step - 1) / step * step;
}

Arena::Arena(std::shared_ptr<Allocator> backing) : backing_(std::move(backing)) {}

Arena::~Arena() { release_cached(); }

void Arena::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) backing_->deallocate(p, size);
    reserved_ -= size * blocks.size();
  }
  free_.clear();
}

void* Arena::allocate(size_t bytes) {
  size_t cls = size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      in_use_ += cls;
      return p;
    }
  }
  void* p = backing_->allocate(cls);  // throws std::bad_alloc when the device is full
  const size_t now = reserved_ += cls;
  size_t prev = peak_reserved_.load();
  while (now > prev && !peak_reserved_.compare_exchange_weak(prev, now)) {
  }
  in_use_ += cls;
  return p;
}

void Arena::deallocate(void* ptr, size_t bytes) {
  size_t cls = size_class(bytes);
  in_use_ -= cls;
  std::lock_guard<std::mutex> lock(mu_);
  free_[cls].push_back(ptr);
}


}  // namespace onyx
