// Conv and ConvTranspose (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad), ONNX
// Runtime's com.microsoft FusedConv (Conv + B + Z, then an activation) and our blocked-layout
// ConvNchwc. float32 and the 16-bit floats run on oneDNN's convolution / deconvolution (cached
// per shape, constant weights reordered once, Z and the activation as post-ops); double and
// shapes oneDNN cannot express (e.g. negative pads from output_shape) run on our own loops.
#include "kernels/cpu/conv.h"

#include "kernels/cpu/cpu_kernels.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

/// One class for every convolution op: they differ in geometry (ConvTranspose), in what is
/// fused after the sum (FusedConv, ConvNchwc) and in layout (ConvNchwc).
class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, ConvOp op)
      : attrs_(info.node),
        op_(op),
        act_(Activation::from_node(info.node)),
        block_(op == ConvOp::ConvNchwc ? info.node.attr_int("block", 8) : 0),
        winograd_(op == ConvOp::ConvNchwc && info.node.attr_int("winograd", 0) == 1),
        const_weights_(info.constant_input(1) != nullptr) {
    ONYX_CHECK(op != ConvOp::ConvNchwc || du::is_layout_block(block_),
               "[{}] block must be 8, 16 or -1 (channels-last), got {}", info.label(), block_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& W = ctx.required_input(1);
    const Tensor* B = ctx.input(2);
    const Tensor* Z = op_ == ConvOp::FusedConv || op_ == ConvOp::ConvNchwc ? ctx.input(3) : nullptr;
    check_conv_weights(ctx, X, W);
    const bool x_blocked = block_ != 0 && X.rank() == 5;
    Shape xs = x_blocked ? logical_shape(ctx, X, W) : X.shape();
    const bool transpose = op_ == ConvOp::ConvTranspose;
    Geometry g =
        transpose ? conv_transpose_geometry(ctx, attrs_, xs, W) : conv_geometry(ctx, attrs_, xs, W);
    check_conv_bias(ctx, X, B, g.M);
    Shape out{g.N, g.M};
    // Y's channel block in memory: block_, or all M channels for channels-last.
    const int64_t y_block = block_ == 0 ? 0 : du::resolve_block(block_, g.M);
    if (block_ != 0) {
      ONYX_CHECK(g.nsp() == 2 && y_block > 0 && g.M % y_block == 0,
                 "[{}] expects a 2-D convolution with output channels a multiple of {}, got {} "
                 "channels and X {}",
                 ctx.label(), block_ > 0 ? block_ : 1, g.M, shape_str(X.shape()));
      out[1] = g.M / y_block;
    }
    out.insert(out.end(), g.out.begin(), g.out.end());
    if (block_ != 0) out.push_back(y_block);
    check_conv_residual(ctx, X, Z, out);
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    if (Y.numel() == 0) return;
    if (X.numel() == 0 || W.numel() == 0) {
      conv_fill_bias(Y, B, g.M, y_block);
      conv_epilogue(Y, Z, act_, ctx.threads());
      return;
    }
    if (X.dtype() != DataType::Double && g.pads_nonnegative()) {
      du::ThreadScope threads(ctx.threads());
      du::PrimitiveCache<ConvEntry>::Key key{static_cast<int64_t>(X.dtype()), ctx.threads(),
                                             B != nullptr, Z != nullptr};
      key.insert(key.end(), X.shape().begin(), X.shape().end());
      key.insert(key.end(), W.shape().begin(), W.shape().end());
      auto e = cache_.get(key, [&] {
        ConvSpec spec{.dt = X.dtype(),
                      .has_bias = B != nullptr,
                      .has_sum = Z != nullptr,
                      .transpose = transpose,
                      .winograd = winograd_,
                      .act = act_,
                      .layout = {x_blocked ? block_ : 0, block_}};
        return make_conv_entry(g, spec);
      });
      if (X.dtype() != DataType::Float && e->run_dt != X.dtype())
        du::note_slow_path(ctx.node().op_type, X.dtype(), e->why);
      if (e->ok) {
        run_conv_entry(ctx, *e, X, W, B, Z, Y, const_weights_);
        return;
      }
    }
    ONYX_CHECK(block_ == 0, "[{}] oneDNN has no convolution for X {} and W {}", ctx.label(),
               shape_str(X.shape()), shape_str(W.shape()));
    if ((X.dtype() == DataType::Float16 || X.dtype() == DataType::BFloat16) &&
        !g.pads_nonnegative())
      du::note_slow_path(ctx.node().op_type, X.dtype(),
                         "negative pads (an output_shape beyond what the input covers) are not "
                         "oneDNN's; onyx's own loops run it, accumulating in float32");
    if (X.dtype() == DataType::Double) gemm_conv(g, X, W, B, Y, transpose, ctx.threads());
    else ref_conv(g, X, W, B, Y, transpose, ctx.threads());
    conv_epilogue(Y, Z, act_, ctx.threads());
  }

 private:
  /// [N, C, H, W] of a blocked [N, ceil(C/block), H, W, block] (or channels-last
  /// [N, 1, H, W, C]) X, with C from W.
  Shape logical_shape(KernelContext& ctx, const Tensor& X, const Tensor& W) const {
    int64_t C = W.rank() > 1 ? W.dim(1) * attrs_.group : 0;
    const int64_t b = du::resolve_block(block_, C);
    ONYX_CHECK(b > 0 && X.dim(4) == b && X.dim(1) == (C + b - 1) / b,
               "[{}] blocked X {} does not hold the {} input channels of W {} in blocks of {}",
               ctx.label(), shape_str(X.shape()), C, shape_str(W.shape()), b);
    return {X.dim(0), C, X.dim(2), X.dim(3)};
  }

  ConvAttrs attrs_;
  ConvOp op_;
  Activation act_;
  int64_t block_;
  bool winograd_;  // ConvNchwc marked by the NCHWc pass (inference/layout_nchwc.cpp)
  bool const_weights_;
  du::PrimitiveCache<ConvEntry> cache_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv_kernel(const KernelInfo& info, ConvOp op) {
  return std::make_unique<ConvKernel>(info, op);
}

void register_conv_kernels(KernelRegistry& r) {
  auto op = [](ConvOp o) {
    return [o](const KernelInfo& i) -> std::unique_ptr<Kernel> { return make_conv_kernel(i, o); };
  };
  r.add({.op_type = "Conv",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = op(ConvOp::Conv)});
  r.add({.op_type = "ConvTranspose",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = op(ConvOp::ConvTranspose)});
  r.add({.op_type = "FusedConv",
         .domain = "com.microsoft",
         .since = 1,
         .types = float_types(),
         .create = op(ConvOp::FusedConv)});
  register_conv_nchwc_kernels(r);
}

}  // namespace onyx::cpu
