// A per-run view of a provider's allocator that counts the run's live and peak bytes
// (RunStats::peak_bytes).
#pragma once

#include <atomic>
#include <memory>

#include "graph/tensor.h"

namespace onyx {

class RunAllocator final : public Allocator {
 public:
  explicit RunAllocator(std::shared_ptr<Allocator> base) : base_(std::move(base)) {}
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return base_->device(); }
  size_t peak_bytes() const { return peak_.load(); }

 private:
  std::shared_ptr<Allocator> base_;
  std::atomic<size_t> live_{0}, peak_{0};
};

}  // namespace onyx
