// The CUDA provider's entry points in a build without CUDA (ONYX_WITH_CUDA off): asking for
// it is a clear error, never a crash.
#include "kernels/provider.h"

namespace onyx {

bool built_with_cuda() { return false; }

const KernelRegistry& cuda_kernel_registry() {
  static const KernelRegistry empty;
  return empty;
}

std::shared_ptr<ExecutionProvider> make_cuda_provider(int device_id) {
  ONYX_THROW("[cuda] no CUDA device: this build of onyx has no CUDA provider (configured without "
             "the CUDA toolkit or with ONYX_WITH_CUDA=OFF); cuda:{} was asked for",
             device_id);
}

}  // namespace onyx
