// Every CUDA kernel family, registered once per process (explicit calls, not static
// initialisers, which a static library drops).
#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {

void register_all_cuda_kernels(KernelRegistry& r) {
  register_memcpy_kernels(r);
  register_reduce_kernels(r);
  register_softmax_kernels(r);
  register_normalization_kernels(r);
  register_attention_kernels(r);
  register_matmul_kernels(r);
  register_conv_kernels(r);
  register_pool_kernels(r);
  register_elementwise_kernels(r);
  register_cast_kernels(r);
  register_data_movement_kernels(r);
  register_gather_scatter_kernels(r);
  register_fill_kernels(r);
}

}  // namespace onyx::cuda
