#include "inference/run_allocator.h"

namespace onyx {

void* RunAllocator::allocate(size_t bytes) {
  void* p = nullptr;
  if (stream_ordered_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find(bytes);
    if (it != kept_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    }
  }
  if (!p) p = base_->allocate(bytes);
  size_t now = live_ += bytes;
  size_t prev = peak_.load();
  while (now > prev && !peak_.compare_exchange_weak(prev, now)) {
  }
  return p;
}

void RunAllocator::deallocate(void* ptr, size_t bytes) {
  live_ -= bytes;
  if (stream_ordered_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream_ordered_.load()) {
      kept_[bytes].push_back(ptr);
      return;
    }
  }
  base_->deallocate(ptr, bytes);
}

void RunAllocator::end_run() {
  std::map<size_t, std::vector<void*>> kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream_ordered_ = false;
    kept.swap(kept_);
  }
  for (auto& [bytes, blocks] : kept)
    for (void* p : blocks) base_->deallocate(p, bytes);
}

}  // namespace onyx
