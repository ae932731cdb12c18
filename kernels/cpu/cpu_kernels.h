// Registration entry points of the CPU kernels, one per op family file.
#pragma once

#include "kernels/kernel.h"

namespace onyx::cpu {

/// Registers every CPU kernel (calls each family's function below).
void register_cpu_kernels(KernelRegistry& r);

void register_unary_kernels(KernelRegistry& r);       // elementwise_unary.cpp
void register_binary_kernels(KernelRegistry& r);      // elementwise_binary.cpp
void register_cast_kernels(KernelRegistry& r);        // cast.cpp
void register_shape_kernels(KernelRegistry& r);       // shape_ops.cpp
void register_tensor_kernels(KernelRegistry& r);      // tensor_ops.cpp
void register_gather_kernels(KernelRegistry& r);      // gather_scatter.cpp
void register_reduce_kernels(KernelRegistry& r);      // reduce.cpp
void register_softmax_kernels(KernelRegistry& r);     // softmax.cpp
void register_einsum_kernels(KernelRegistry& r);      // einsum.cpp
void register_matmul_kernels(KernelRegistry& r);      // matmul.cpp
void register_conv_kernels(KernelRegistry& r);        // conv.cpp
void register_pool_kernels(KernelRegistry& r);        // pool.cpp
void register_norm_kernels(KernelRegistry& r);        // normalization.cpp
void register_control_flow_kernels(KernelRegistry& r);  // control_flow.cpp

}  // namespace onyx::cpu
