// The CPU provider: host memory from a caching arena, every CPU kernel, and the NCHWc
// convolution layout oneDNN prefers on this CPU.
#include <cstring>

#include "kernels/arena.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/int8_util.h"
#include "kernels/provider.h"

namespace onyx {
namespace {

class CpuProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return {}; }
  std::shared_ptr<Allocator> allocator() const override { return arena_; }
  const KernelRegistry& registry() const override { return cpu_kernel_registry(); }
  LayoutPreferences layout_preferences() const override {
    return {.conv_channel_block = cpu::dnnl_util::nchwc_block(),
            .winograd_channel_block = cpu::dnnl_util::winograd_block(),
            .exact_int8_convolutions = cpu::exact_int8_dot_products()};
  }
  void copy(const Tensor& src, Tensor& dst, RunResources*) const override {
    ONYX_CHECK(src.device().type == DeviceType::CPU && dst.device().type == DeviceType::CPU,
               "[cpu] copy from {} to {}: the CPU provider copies host memory only",
               src.device().str(), dst.device().str());
    ONYX_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.dtype() != DataType::String,
               "[cpu] copy of {} {} into {} {}", dtype_name(src.dtype()), shape_str(src.shape()),
               dtype_name(dst.dtype()), shape_str(dst.shape()));
    if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }

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

}  // namespace onyx
