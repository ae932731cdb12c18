// A per-run view of a provider's allocator that counts the run's live and peak bytes
// (RunStats::peak_bytes). On a device whose kernels run asynchronously on the run's stream,
// a block freed during the run may still be read by queued work: such a view keeps freed
// blocks for this run alone (reuse in stream order is safe) and gives them back to the shared
// allocator in end_run(), after the stream has been synchronized.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "graph/tensor.h"

namespace onyx {

class RunAllocator final : public Allocator {
 public:
  /// `stream_ordered`: keep freed blocks until end_run() (device memory); else free at once.
  explicit RunAllocator(std::shared_ptr<Allocator> base, bool stream_ordered = false)
      : base_(std::move(base)), stream_ordered_(stream_ordered) {}
  ~RunAllocator() override { end_run(); }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return base_->device(); }
  size_t peak_bytes() const { return peak_.load(); }
  /// Returns the blocks kept for this run; later frees go straight to the base allocator.
  /// Call once the run's stream has finished.
  void end_run();

 private:
  std::shared_ptr<Allocator> base_;
  std::atomic<bool> stream_ordered_;
  std::atomic<size_t> live_{0}, peak_{0};
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> kept_;  // size -> blocks freed during the run
};

}  // namespace onyx
