// ai.onyx MemcpyFromHost / MemcpyToHost: the copies the session inserts where a value crosses
// between host and device. They are ordinary nodes, so the profile and `onyx inspect --plan`
// show every transfer. Both queue on the run's stream; a copy to the host waits for it.
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {
namespace {

void copy_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  ONYX_CHECK(x.dtype() != DataType::String, "[{}] string tensors cannot move to or from a CUDA device",
             ctx.label());
  if (x.nbytes() == 0) return;
  cudaStream_t s = stream_of(ctx);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDefault, s));
  if (y.device().type == DeviceType::CPU) ONYX_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace

void register_memcpy_kernels(KernelRegistry& r) {
  r.add({.op_type = "MemcpyFromHost", .domain = "ai.onyx", .provider = kProvider, .type_input = -1,
         .create = function_factory(copy_kernel), .host_inputs = {0}});
  r.add({.op_type = "MemcpyToHost", .domain = "ai.onyx", .provider = kProvider, .type_input = -1,
         .create = function_factory(copy_kernel), .host_outputs = {0}});
}

}  // namespace onyx::cuda
