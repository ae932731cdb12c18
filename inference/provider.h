// ExecutionProvider: a device with its allocator and kernels. The session places each
// node on the first provider (in priority order) that has a kernel for it; CPU is last.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace onyx {

class ExecutionProvider {
 public:
  virtual ~ExecutionProvider() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  /// Memory for tensors the provider's kernels produce (shared by all runs; thread-safe).
  virtual std::shared_ptr<Allocator> allocator() const = 0;
  virtual const KernelRegistry& registry() const = 0;
};

/// The CPU provider: a caching arena and every CPU kernel (kernels/cpu).
std::shared_ptr<ExecutionProvider> make_cpu_provider();
/// The CPU kernels, registered once per process.
const KernelRegistry& cpu_kernel_registry();
/// Every provider this build has, in placement priority order (CPU last, the fallback).
/// A new provider joins this list; op_support() (`onyx ops`) reads it.
std::vector<std::shared_ptr<ExecutionProvider>> available_providers();

}  // namespace onyx
