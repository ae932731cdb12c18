// A caching CPU allocator: freed blocks go to per-size free lists and are handed out again,
// so steady-state runs neither call malloc nor page-fault fresh memory.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "graph/tensor.h"

namespace onyx {

class Arena final : public Allocator {
 public:
  Arena() = default;
  ~Arena() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;

  /// Bytes held from the system (in use + cached).
  size_t reserved_bytes() const { return reserved_.load(); }
  /// Bytes handed out and not yet returned.
  size_t in_use_bytes() const { return in_use_.load(); }
  /// Rounds a request up to the size class it is served from.
  static size_t size_class(size_t bytes);

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::atomic<size_t> reserved_{0}, in_use_{0};
};

/// Per-run view of an arena that counts the run's live and peak bytes.
class RunAllocator final : public Allocator {
 public:
  explicit RunAllocator(std::shared_ptr<Allocator> base) : base_(std::move(base)) {}
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  size_t peak_bytes() const { return peak_.load(); }

 private:
  std::shared_ptr<Allocator> base_;
  std::atomic<size_t> live_{0}, peak_{0};
};

}  // namespace onyx
