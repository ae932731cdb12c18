// The blocked-layout ops of the optimizer's NCHWc pass (domain ai.onyx): ConvNchwc (conv.cpp's
// kernel on blocked tensors) and the reorders at the boundary, ToNchwc (plain [N, C, H, W] to
// blocked [N, ceil(C/b), H, W, b], padding channels zero; b = C for channels-last, block -1)
// and FromNchwc (back, attribute `channels`). Both reorders are oneDNN's, cached per shape.
#include <utility>

#include "kernels/cpu/conv.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

/// ToNchwc (to_blocked) and FromNchwc.
class NchwcReorderKernel final : public Kernel {
 public:
  NchwcReorderKernel(const KernelInfo& info, bool to_blocked)
      : to_blocked_(to_blocked),
        block_(to_blocked ? info.node.attr_int("block", 8) : 0),
        channels_(to_blocked ? 0 : info.node.require_attr("channels", Attribute::Type::Int).i) {
    ONYX_CHECK(!to_blocked || du::is_layout_block(block_),
               "[{}] block must be 8, 16 or -1 (channels-last), got {}", info.label(), block_);
    ONYX_CHECK(to_blocked || channels_ >= 1, "[{}] channels must be at least 1, got {}",
               info.label(), channels_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    Shape nchw;
    int64_t block = block_;  // the layout: 8, 16 or kChannelsLast
    if (to_blocked_) {
      ONYX_CHECK(X.rank() == 4 && (block_ != du::kChannelsLast || X.dim(1) > 0),
                 "[{}] X must be [N, C, H, W]{}, got {}", ctx.label(),
                 block_ == du::kChannelsLast ? " with C > 0" : "", shape_str(X.shape()));
      nchw = X.shape();
    } else {
      const int64_t b = X.rank() == 5 ? X.dim(4) : 0;
      const bool last = X.rank() == 5 && X.dim(1) == 1 && b == channels_;
      ONYX_CHECK(last || ((b == 8 || b == 16) && X.dim(1) == (channels_ + b - 1) / b),
                 "[{}] X must be blocked [N, ceil({}/b), H, W, b] with b 8 or 16, or "
                 "channels-last [N, 1, H, W, {}], got {}",
                 ctx.label(), channels_, channels_, shape_str(X.shape()));
      // A block of 8 or 16 channels is the same bytes either way.
      block = b == 8 || b == 16 ? b : du::kChannelsLast;
      nchw = {X.dim(0), channels_, X.dim(2), X.dim(3)};
    }
    Shape out = nchw;
    if (to_blocked_) {
      const int64_t b = du::resolve_block(block, nchw[1]);
      out[1] = (nchw[1] + b - 1) / b;
      out.push_back(b);
    }
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    if (Y.numel() == 0) return;
    du::ThreadScope threads(ctx.threads());
    du::PrimitiveCache<Entry>::Key key(X.shape().begin(), X.shape().end());
    key.push_back(ctx.threads());
    auto e = cache_.get(key, [&] {
      Entry made{du::plain_desc(nchw, DataType::Float),
                 du::blocked_desc(nchw, DataType::Float, block),
                 {}};
      if (!to_blocked_) std::swap(made.from, made.to);
      made.reorder = du::make_reorder(made.from, made.to);
      return made;
    });
    du::execute(
        ctx, e->reorder,
        {{DNNL_ARG_FROM, du::wrap(e->from, X.raw())}, {DNNL_ARG_TO, du::wrap(e->to, Y.raw())}});
  }

 private:
  struct Entry {
    dnnl::memory::desc from, to;
    du::Prim reorder;
  };
  bool to_blocked_;
  int64_t block_, channels_;
  du::PrimitiveCache<Entry> cache_;
};

}  // namespace

void register_conv_nchwc_kernels(KernelRegistry& r) {
  const std::vector<DataType> f32{DataType::Float};
  r.add({.op_type = "ConvNchwc",
         .domain = "ai.onyx",
         .since = 1,
         .types = f32,
         .create = [](const KernelInfo& i) { return make_conv_kernel(i, ConvOp::ConvNchwc); }});
  for (bool to : {true, false})
    r.add({.op_type = to ? "ToNchwc" : "FromNchwc",
           .domain = "ai.onyx",
           .since = 1,
           .types = f32,
           .create = [to](const KernelInfo& i) -> std::unique_ptr<Kernel> {
             return std::make_unique<NchwcReorderKernel>(i, to);
           }});
}

}  // namespace onyx::cpu
