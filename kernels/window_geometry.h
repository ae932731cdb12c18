// Sliding-window geometry of the convolution and pooling ops (ONNX's strides, dilations, pads,
// auto_pad, ceil_mode, output_padding and output_shape rules): host arithmetic that the CPU and
// CUDA kernels share, so both providers size their outputs and refuse bad attributes alike.
#pragma once

#include <string>

#include "graph/error.h"
#include "graph/tensor.h"
#include "kernels/kernel.h"

namespace onyx {

/// Every value of an INTS attribute in [lo, hi], checked when the kernel is created: the error
/// names the node, the attribute, the list and the allowed range.
void check_attr_values(const std::string& label, const char* name, const Shape& v, int64_t lo,
                       int64_t hi);

/// Strides and dilations of a window op over `nsp` spatial dims, 1 where the attribute is
/// absent; onyx::Error when they or `pads` do not fit `nsp` or a step is below 1.
struct WindowSteps {
  Shape stride, dil;
  WindowSteps(const std::string& label, const Shape& strides, const Shape& dilations,
              const Shape& pads, size_t nsp);
};

/// Attributes shared by Conv, ConvTranspose, FusedConv and ConvNchwc, parsed at session creation.
struct ConvAttrs {
  std::string auto_pad;
  Shape kernel_shape, strides, dilations, pads, output_padding, output_shape;
  int64_t group;
  explicit ConvAttrs(const Node& n);
};

/// One run's convolution geometry. Spatial vectors have `nsp` entries; pads may be negative
/// only for ConvTranspose with output_shape.
struct ConvGeometry {
  int64_t N = 0, C = 0, M = 0, G = 1;  // batch, input channels, output channels, groups
  Shape in, out, k, stride, dil, pad_l, pad_r;
  size_t nsp() const { return in.size(); }
  bool pads_nonnegative() const;
};

/// Checks X (given by its logical [N, C, spatial...] shape) against W and computes the output
/// geometry of a convolution or a transposed convolution.
ConvGeometry conv_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                           const Tensor& W);
ConvGeometry conv_transpose_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                                     const Tensor& W);

/// W of X's dtype (checked before the geometry).
void check_conv_weights(const KernelContext& ctx, const Tensor& X, const Tensor& W);

/// The optional bias B: 1-D, M values of X's dtype.
void check_conv_bias(const KernelContext& ctx, const Tensor& X, const Tensor* B, int64_t M);

/// FusedConv's optional residual Z: X's dtype and the output's shape `out`.
void check_conv_residual(const KernelContext& ctx, const Tensor& X, const Tensor* Z,
                         const Shape& out);

/// The activation a FusedConv applies after bias and Z: com.microsoft's `activation` string
/// with `activation_params` (alpha for LeakyRelu; min, max for Clip; alpha, beta for
/// HardSigmoid).
struct ConvActivationParams {
  enum class Kind { None, Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSigmoid };
  Kind kind = Kind::None;
  float alpha = 0, beta = 0;
};

/// From the node's attributes; onyx::Error naming the node for an unknown name or a wrong
/// parameter count.
ConvActivationParams parse_conv_activation(const Node& n);

/// MaxPool / AveragePool / LpPool attributes, checked at session creation (bounds that keep the
/// window arithmetic inside int64).
struct PoolAttrs {
  std::string auto_pad;
  Shape kernel_shape, strides, dilations, pads;
  bool ceil_mode, count_include_pad, column_major;
  double p;  // LpPool's order; 0 for the others
  PoolAttrs(const KernelInfo& info, bool lp_pool);
};

struct PoolGeometry {
  int64_t N = 0, C = 0;
  Shape in, out, k, stride, dil, pad_l, pad_r;
};

/// Pooling geometry for X of (logical) shape [N, C, spatial...]: 1 to 3 spatial dims.
PoolGeometry pool_geometry(KernelContext& ctx, const PoolAttrs& a, const Shape& x);

}  // namespace onyx
