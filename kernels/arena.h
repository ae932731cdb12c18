// A caching allocator over any device's raw allocator (the CPU heap, cudaMalloc): freed
// blocks go to per-size free lists and are handed out again, so steady-state runs neither
// call the system allocator nor page-fault fresh memory. Each provider owns one.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "graph/tensor.h"

namespace onyx {

class Arena final : public Allocator {
 public:
  /// Caches blocks of `backing` (the CPU heap by default); its device is the arena's.
  explicit Arena(std::shared_ptr<Allocator> backing = cpu_allocator());
  ~Arena() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return backing_->device(); }

  /// Bytes held from the system (in use + cached).
  size_t reserved_bytes() const { return reserved_.load(); }
  /// Bytes handed out and not yet returned.
  size_t in_use_bytes() const { return in_use_.load(); }
  /// Most bytes held from the system at once.
  size_t peak_reserved_bytes() const { return peak_reserved_.load(); }
  /// Returns every cached block to the backing allocator (after an out-of-memory, say).
  void release_cached();
  /// Rounds a request up to the size class it is served from.
  static size_t size_class(size_t bytes);

 private:
  std::shared_ptr<Allocator> backing_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::atomic<size_t> reserved_{0}, in_use_{0}, peak_reserved_{0};
};

}  // namespace onyx
