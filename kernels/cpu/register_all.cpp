#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/isa.h"

namespace onyx::cpu {

void register_cpu_kernels(KernelRegistry& r) {
  // Decide the ISA (and cap oneDNN's to it) before any kernel can run: a bad ONYX_ISA is
  // reported when the first session is built.
  active_isa();
  register_unary_kernels(r);
  register_binary_kernels(r);
  register_cast_kernels(r);
  register_shape_kernels(r);
  register_tensor_kernels(r);
  register_gather_kernels(r);
  register_reduce_kernels(r);
  register_softmax_kernels(r);
  register_einsum_kernels(r);
  register_matmul_kernels(r);
  register_conv_kernels(r);
  register_conv_weight_grad_kernels(r);
  register_pool_kernels(r);
  register_norm_kernels(r);
  register_control_flow_kernels(r);
  register_sequence_kernels(r);
  register_optional_kernels(r);
  register_string_kernels(r);
  register_signal_kernels(r);
  register_ml_kernels(r);
  register_resize_kernels(r);
  register_grid_sample_kernels(r);
  register_quantize_kernels(r);
  register_image_kernels(r);
  register_image_decoder_kernels(r);
  register_attention_kernels(r);
  register_loss_kernels(r);
  register_rnn_kernels(r);
  register_misc_nn_kernels(r);
  register_training_kernels(r);
  register_batch_norm_grad_kernels(r);
  register_gelu_grad_kernels(r);
  register_softmax_attention_grad_kernels(r);
  register_relu_grad_kernels(r);
  register_add_softmax_kernels(r);
  register_max_pool_grad_kernels(r);
  register_softmax_cross_entropy_grad_kernels(r);
  register_softmax_cross_entropy_loss_grad_kernels(r);
  register_scatter_add_sum_kernels(r);
  register_layer_norm_grad_kernels(r);
  register_tfidf_kernels(r);
  register_causal_conv_kernels(r);
  register_linear_attention_kernels(r);
  register_flex_attention_kernels(r);
}

}  // namespace onyx::cpu
