// Conv and ConvTranspose (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad), ONNX
// Runtime's com.microsoft FusedConv (Conv + B + Z, then an activation) and our blocked-layout
// ConvNchwc. float32 and the 16-bit floats run on oneDNN's convolution / deconvolution (cached
// per shape, constant weights reordered once, Z and the activation as post-ops); double and
// shapes oneDNN cannot express (e.g. negative pads from output_shape) run on our own loops.
#include "kernels/cpu/conv.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/winograd_conv.h"
#include "kernels/prepare_context.h"

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
        node_(info.node) {
    ONYX_CHECK(op != ConvOp::ConvNchwc || du::is_layout_block(block_),
               "[{}] block must be 8, 16 or -1 (channels-last), got {}", info.label(), block_);
    if (const Tensor* w = info.constant_input(1)) w_const_ = *w;
  }

  /// Packs constant weights now rather than in the first run, for X's shape as inferred with a
  /// batch of 1 where the batch is not fixed (the weights' layout does not depend on it on the
  /// kernels measured; where it does, the first run packs its own and this one is dropped).
  /// Nothing when some other dim of X is unknown or the shapes do not fit: the run says why.
  size_t prepare(int threads) override {
    if (!w_const_ || w_const_->dtype() == DataType::Double || !node_.has_input(0)) return 0;
    const ValueType& xt = node_.inputs[0]->type;
    if (!xt.is_tensor() || !xt.shape || xt.shape->empty()) return 0;
    Shape xs;
    int64_t elements = 1;
    for (size_t i = 0; i < xt.shape->size(); ++i) {
      const Dim& d = (*xt.shape)[i];
      if (!d.is_fixed() && i != 0) return 0;
      xs.push_back(d.is_fixed() ? d.value : 1);
      // A declared X no tensor could be (a malformed model's) is left to the run to refuse.
      if (xs.back() > (int64_t{1} << 31) || (elements *= std::max<int64_t>(xs.back(), 1)) > (int64_t{1} << 34))
        return 0;
    }
    const Tensor& W = *w_const_;
    const bool x_blocked = block_ != 0 && xs.size() == 5;
    if (x_blocked) {
      if (W.rank() != 4) return 0;
      xs = {xs[0], W.dim(1) * attrs_.group, xs[2], xs[3]};
    }
    PrepareContext ctx(node_, threads);
    du::ThreadScope scope(threads);
    try {
      const bool transpose = op_ == ConvOp::ConvTranspose;
      Geometry g = transpose ? conv_transpose_geometry(ctx, attrs_, xs, W)
                             : conv_geometry(ctx, attrs_, xs, W);
      const int64_t y_block = block_ == 0 ? 0 : du::resolve_block(block_, g.M);
      if (!g.pads_nonnegative() || (block_ != 0 && (g.nsp() != 2 || g.M % y_block != 0)))
        return 0;
      if (own_winograd(g, x_blocked, W.dtype()))
        return own_winograd_weights(winograd_tile(g), W, threads).nbytes();
      ConvEntry e = make_conv_entry(g, spec(W.dtype(), node_.has_input(2), has_z(), x_blocked));
      if (!e.ok) return 0;
      e.packed = packs_.for_entry(e, true);
      return pack_constant_conv_weights(ctx, e, W);
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception&) {
      return 0;  // shapes the run will refuse (naming what is wrong) or a layout it will not take
    }
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& W = ctx.required_input(1);
    const Tensor* B = ctx.input(2);
    const Tensor* Z = has_z_input() ? ctx.input(3) : nullptr;
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
    if (own_winograd(g, x_blocked, X.dtype())) {
      run_own_winograd(ctx, g, X, W, B, Z, Y);
      return;
    }
    if (X.dtype() != DataType::Double && g.pads_nonnegative()) {
      du::ThreadScope threads(ctx.threads());
      du::PrimitiveCache<ConvEntry>::Key key{static_cast<int64_t>(X.dtype()), ctx.threads(),
                                             B != nullptr, Z != nullptr};
      key.insert(key.end(), X.shape().begin(), X.shape().end());
      key.insert(key.end(), W.shape().begin(), W.shape().end());
      auto e = cache_.get(key, [&] {
        ConvEntry made = make_conv_entry(g, spec(X.dtype(), B != nullptr, Z != nullptr, x_blocked));
        if (made.ok && w_const_) made.packed = packs_.for_entry(made, false);
        return made;
      });
      if (X.dtype() != DataType::Float && e->run_dt != X.dtype())
        du::note_slow_path(ctx.node().op_type, X.dtype(), e->why);
      if (e->ok) {
        run_conv_entry(ctx, *e, X, W, B, Z, Y, w_const_.has_value());
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
  bool has_z_input() const { return op_ == ConvOp::FusedConv || op_ == ConvOp::ConvNchwc; }
  bool has_z() const { return has_z_input() && node_.has_input(3); }

  /// A ConvNchwc the NCHWc pass marked for Winograd on 8-channel blocks runs on our own
  /// kernel (kernels/cpu/winograd_conv.h): the block of CPUs where oneDNN has none.
  bool own_winograd(const Geometry& g, bool x_blocked, DataType dt) const {
    return winograd_ && block_ == 8 && x_blocked && dt == DataType::Float && winograd_suits(g);
  }

  /// The constant W transformed once per output tile (ahead of the runs by prepare(), else by
  /// the first run).
  const Tensor& own_winograd_weights(int tile, const Tensor& W, int threads) const {
    std::lock_guard<std::mutex> lock(wino_mu_);
    Tensor& u = wino_u_[tile == 4];
    if (!u.defined()) {
      Tensor made =
          Tensor::empty(DataType::Float, {winograd_weights_numel(tile, W.dim(0), W.dim(1))});
      winograd_pack_weights(tile, W.data<float>(), W.dim(0), W.dim(1), made.data<float>(),
                            threads);
      u = std::move(made);
    }
    return u;
  }

  void run_own_winograd(KernelContext& ctx, const Geometry& g, const Tensor& X, const Tensor& W,
                        const Tensor* B, const Tensor* Z, Tensor& Y) const {
    const int tile = winograd_tile(g);
    Tensor u;
    if (w_const_) {
      u = own_winograd_weights(tile, W, ctx.threads());
    } else {
      u = ctx.scratch(DataType::Float, {winograd_weights_numel(tile, g.M, g.C)});
      winograd_pack_weights(tile, W.data<float>(), g.M, g.C, u.data<float>(), ctx.threads());
    }
    Tensor scratch =
        ctx.scratch(DataType::Float, {winograd_scratch_numel(tile, g, ctx.threads())});
    winograd_conv(tile, g, X.data<float>(), u.data<float>(), B ? B->data<float>() : nullptr,
                  Z ? Z->data<float>() : nullptr, Y.data<float>(), act_, scratch.data<float>(),
                  ctx.threads());
  }

  ConvSpec spec(DataType dt, bool has_bias, bool has_sum, bool x_blocked) const {
    return ConvSpec{.dt = dt,
                    .has_bias = has_bias,
                    .has_sum = has_sum,
                    .transpose = op_ == ConvOp::ConvTranspose,
                    .winograd = winograd_,
                    .act = act_,
                    .layout = {x_blocked ? block_ : 0, block_}};
  }

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
  const Node& node_;
  // W when it is an initializer: packed once per layout (packs_), ahead of the runs by prepare().
  std::optional<Tensor> w_const_;
  mutable ConvWeightPacks packs_;  // constant W per layout, shared by the entries
  mutable std::mutex wino_mu_;
  mutable Tensor wino_u_[2];  // constant W for own_winograd()'s tiles 2 and 4, by wino_mu_
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
