#include "inference/run_allocator.h"

namespace onyx {

void* RunAllocator::allocate(size_t bytes) {
  void* p = base_->allocate(bytes);
  size_t now = live_ += bytes;
  size_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
  return p;
}

void RunAllocator::deallocate(void* ptr, size_t bytes) {
  live_ -= bytes;
  base_->deallocate(ptr, bytes);
}

}  // namespace onyx
