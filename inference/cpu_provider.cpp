#include "inference/arena.h"
#include "inference/provider.h"
#include "kernels/cpu/cpu_kernels.h"

namespace onyx {
namespace {

class CpuProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return {}; }
  std::shared_ptr<Allocator> allocator() const override { return arena_; }
  const KernelRegistry& registry() const override { return cpu_kernel_registry(); }

 private:
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>();
};

}  // namespace

const KernelRegistry& cpu_kernel_registry() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    cpu::register_cpu_kernels(r);
    return r;
  }();
  return registry;
}

std::shared_ptr<ExecutionProvider> make_cpu_provider() { return std::make_shared<CpuProvider>(); }

std::vector<std::shared_ptr<ExecutionProvider>> available_providers() { return {make_cpu_provider()}; }

}  // namespace onyx
