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
void register_conv_weight_grad_kernels(KernelRegistry& r);  // conv_weight_grad.cpp
void register_pool_kernels(KernelRegistry& r);        // pool.cpp
void register_norm_kernels(KernelRegistry& r);        // normalization.cpp
void register_control_flow_kernels(KernelRegistry& r);  // control_flow.cpp
void register_sequence_kernels(KernelRegistry& r);   // sequence_ops.cpp
void register_optional_kernels(KernelRegistry& r);   // optional_ops.cpp
void register_string_kernels(KernelRegistry& r);     // string_ops.cpp
void register_signal_kernels(KernelRegistry& r);     // signal_ops.cpp
void register_ml_kernels(KernelRegistry& r);         // ml_ops.cpp
void register_resize_kernels(KernelRegistry& r);      // resize.cpp
void register_grid_sample_kernels(KernelRegistry& r); // grid_sample.cpp
void register_quantize_kernels(KernelRegistry& r);    // quantize.cpp
void register_image_kernels(KernelRegistry& r);       // image_ops.cpp
void register_image_decoder_kernels(KernelRegistry& r);  // image_decoder.cpp
void register_attention_kernels(KernelRegistry& r);   // attention.cpp
void register_loss_kernels(KernelRegistry& r);        // loss.cpp
void register_rnn_kernels(KernelRegistry& r);         // rnn.cpp
void register_misc_nn_kernels(KernelRegistry& r);     // misc_nn.cpp
void register_training_kernels(KernelRegistry& r);    // training_ops.cpp
void register_batch_norm_grad_kernels(KernelRegistry& r);  // batch_norm_grad.cpp
void register_gelu_grad_kernels(KernelRegistry& r);        // gelu_grad.cpp
void register_softmax_attention_grad_kernels(KernelRegistry& r);  // softmax_attention_grad.cpp
void register_relu_grad_kernels(KernelRegistry& r);        // relu_grad.cpp
void register_max_pool_grad_kernels(KernelRegistry& r);    // max_pool_grad.cpp
void register_softmax_cross_entropy_grad_kernels(KernelRegistry& r);  // softmax_cross_entropy_grad.cpp
void register_softmax_cross_entropy_loss_grad_kernels(KernelRegistry& r);  // softmax_cross_entropy_loss_grad.cpp
void register_scatter_add_sum_kernels(KernelRegistry& r);  // scatter_add_sum.cpp
void register_add_softmax_kernels(KernelRegistry& r);      // add_softmax.cpp
void register_layer_norm_grad_kernels(KernelRegistry& r);  // layer_norm_grad.cpp
void register_tfidf_kernels(KernelRegistry& r);       // tfidf.cpp
void register_causal_conv_kernels(KernelRegistry& r);  // causal_conv.cpp
void register_linear_attention_kernels(KernelRegistry& r);  // linear_attention.cpp
void register_flex_attention_kernels(KernelRegistry& r);    // flex_attention.cpp

}  // namespace onyx::cpu
