// Attention (opset 23+) on CUDA, mirroring kernels/cpu/attention.cpp: 3-D or 4-D Q/K/V,
// grouped KV heads, boolean or additive masks (broadcast over batch, heads and queries; keys
// past the mask's last axis masked), is_causal and the opset-25 sliding window aligned to the
// KV cache or to nonpad_kv_seqlen, past_key/past_value with present outputs, softcap, scale,
// softmax_precision and every qk_matmul_output_mode. float, float16 and bfloat16 (double stays
// on the CPU kernel). Head sizes up to 256 run the fused kernel; larger ones (or a device whose
// shared memory is too small for it) materialise the probabilities and multiply by V.
#include <climits>
#include <cmath>
#include <optional>

#include "kernels/attention_geometry.h"
#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {
namespace {

std::optional<attn::DType> attn_dtype(DataType t) {
  switch (t) {
    case DataType::Float: return attn::DType::F32;
    case DataType::Float16: return attn::DType::F16;
    case DataType::BFloat16: return attn::DType::BF16;
    default: return std::nullopt;
  }
}

attn::MaskType mask_type(DataType t) {
  switch (t) {
    case DataType::Bool: return attn::MaskType::Bool;
    case DataType::Float: return attn::MaskType::F32;
    case DataType::Double: return attn::MaskType::F64;
    case DataType::Float16: return attn::MaskType::F16;
    case DataType::BFloat16: return attn::MaskType::BF16;
    default: return attn::MaskType::None;
  }
}

/// v rounded to dtype t and back (the CPU kernel rounds scale and softcap to the input dtype).
float round_to(DataType t, double v) {
  if (t == DataType::Float16) return static_cast<float>(float16(static_cast<float>(v)));
  if (t == DataType::BFloat16) return static_cast<float>(bfloat16(static_cast<float>(v)));
  return static_cast<float>(v);
}

/// Rows of heads in a 3-D ([B, S, H*D]) or 4-D ([B, H, S, D]) tensor.
attn::View head_view(const void* p, bool three_d, int64_t heads, int64_t seq, int64_t dim) {
  attn::View v;
  v.p = p;
  if (three_d) v.batch = seq * heads * dim, v.head = dim, v.row = heads * dim;
  else v.batch = heads * seq * dim, v.head = seq * dim, v.row = dim;
  return v;
}

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const KernelInfo& info) : attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& q = ctx.required_input(0);
    const Tensor& k = ctx.required_input(1);
    const Tensor& v = ctx.required_input(2);
    const Tensor* mask = opt_input(ctx, 3);
    const Tensor* past_k = opt_input(ctx, 4);
    const Tensor* past_v = opt_input(ctx, 5);
    const Tensor* nonpad = opt_input(ctx, 6);
    const AttnGeom g = attention_geometry(ctx, attrs_);
    const auto dt = attn_dtype(q.dtype());
    ONYX_CHECK(dt, "[{}] the CUDA kernel does not take {} input", ctx.label(), dtype_name(q.dtype()));
    // Grid axes: heads and batch ride on gridDim.y / z.
    ONYX_CHECK(g.B <= 65535 && g.Hq <= 65535, "[{}] batch {} or heads {} exceed the CUDA kernel's 65535", ctx.label(),
               g.B, g.Hq);
    const cudaStream_t s = stream_of(ctx);
    const int elem = static_cast<int>(dtype_size(q.dtype()));

    // present = concat(past, new) in [B, Hk, Skv, D]; with no past the kernels read K and V
    // where they are and present is only a copy.
    const Shape present_k_shape{g.B, g.Hk, g.Skv, g.Dq}, present_v_shape{g.B, g.Hk, g.Skv, g.Dv};
    const bool want_pk = ctx.num_outputs() > 1 && ctx.output_wanted(1);
    const bool want_pv = ctx.num_outputs() > 2 && ctx.output_wanted(2);
    Tensor pk_scratch, pv_scratch;
    attn::View kview = head_view(k.raw(), g.three_d, g.Hk, g.Snew, g.Dq);
    attn::View vview = head_view(v.raw(), g.three_d, g.Hk, g.Snew, g.Dv);
    auto cache = [&](int out, bool wanted, const Tensor* past, const attn::View& cur, int64_t D, const Shape& shape,
                     Tensor& holder, attn::View& view) {
      if (!wanted && !past) return;
      Tensor& present = wanted ? ctx.allocate_output(out, q.dtype(), shape) : (holder = ctx.scratch(q.dtype(), shape));
      attn::launch_concat(past ? past->raw() : nullptr, cur, present.raw(), elem, g.B, g.Hk, g.P, g.Snew, D, s);
      ONYX_CUDA_CHECK(cudaGetLastError());
      if (past) view = head_view(present.raw(), false, g.Hk, g.Skv, D);
    };
    cache(1, want_pk, past_k, kview, g.Dq, present_k_shape, pk_scratch, kview);
    cache(2, want_pv, past_v, vview, g.Dv, present_v_shape, pv_scratch, vview);

    Tensor& y = ctx.allocate_output(0, q.dtype(), g.three_d ? Shape{g.B, g.Sq, g.Hq * g.Dv} : Shape{g.B, g.Hq, g.Sq, g.Dv});
    attn::Params p;
    p.B = g.B, p.Hq = g.Hq, p.Hk = g.Hk, p.Sq = g.Sq, p.Skv = g.Skv, p.P = g.P, p.Dq = g.Dq, p.Dv = g.Dv;
    p.q = head_view(q.raw(), g.three_d, g.Hq, g.Sq, g.Dq);
    p.k = kview, p.v = vview;
    const attn::View yv = head_view(y.raw(), g.three_d, g.Hq, g.Sq, g.Dv);
    p.y = y.raw(), p.y_batch = yv.batch, p.y_head = yv.head, p.y_row = yv.row;
    if (mask) {
      // Strides over [B, H, Sq, Lm], 0 where the mask broadcasts (as the CPU kernel).
      const int64_t r = mask->rank(), lm = mask->dim(-1);
      int64_t stride = 1;
      for (int64_t i = 1; i <= r; ++i) {
        p.mask_st[4 - i] = mask->dim(-i) == 1 ? 0 : stride;
        stride *= mask->dim(-i);
      }
      if (lm == 1) p.mask_st[3] = 0;
      p.mask = mask->raw(), p.mask_t = mask_type(mask->dtype()), p.mask_len = lm;
    }
    p.nonpad = nonpad ? nonpad->data<int64_t>() : nullptr;
    p.causal = attrs_.is_causal, p.left = attrs_.left, p.right = attrs_.right;
    const double scale = attrs_.has_scale ? attrs_.scale : 1.0 / std::sqrt(static_cast<double>(g.Dq));
    p.q_scale = round_to(q.dtype(), std::sqrt(scale));
    p.softcap = attrs_.softcap > 0 ? round_to(q.dtype(), attrs_.softcap) : 0.f;
    const DataType sm_dt = attrs_.softmax_dt == DataType::Undefined ? q.dtype() : attrs_.softmax_dt;
    p.sm_round = sm_dt == DataType::Float16    ? attn::Round::F16
                 : sm_dt == DataType::BFloat16 ? attn::Round::BF16
                                               : attn::Round::None;

    // The score kernels keep one query row (Dq floats) in shared memory.
    const bool scores_fit = g.Dq * static_cast<int64_t>(sizeof(float)) <= 48 * 1024;
    if (y.numel() > 0) {
      if (attn::flash_supported(*dt, g.Dq, g.Dv)) {
        const size_t bytes = attn::flash_scratch_bytes(*dt, p);
        Tensor part = bytes ? ctx.scratch(DataType::UInt8, {static_cast<int64_t>(bytes)}) : Tensor();
        attn::launch_flash(*dt, p, bytes ? part.raw() : nullptr, s);
        ONYX_CUDA_CHECK(cudaGetLastError());
      } else {
        ONYX_CHECK(scores_fit, "[{}] head size {} is larger than the CUDA kernels take (12288)", ctx.label(), g.Dq);
        Tensor probs = ctx.scratch(q.dtype(), {g.B, g.Hq, g.Sq, g.Skv});
        attn::launch_scores(*dt, p, 3, probs.raw(), s);
        ONYX_CUDA_CHECK(cudaGetLastError());
        attn::launch_pv(*dt, p, probs.raw(), s);
        ONYX_CUDA_CHECK(cudaGetLastError());
      }
    }
    if (ctx.num_outputs() > 3 && ctx.output_wanted(3)) {
      Tensor& qk = ctx.allocate_output(3, q.dtype(), {g.B, g.Hq, g.Sq, g.Skv});
      if (qk.numel() > 0) {
        ONYX_CHECK(scores_fit, "[{}] head size {} is larger than the CUDA kernels take (12288)", ctx.label(), g.Dq);
        attn::launch_scores(*dt, p, static_cast<int>(attrs_.mode), qk.raw(), s);
        ONYX_CUDA_CHECK(cudaGetLastError());
      }
    }
  }

 private:
  AttentionAttrs attrs_;
};

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add({.op_type = "Attention",
         .domain = "",
         .since = 23,
         .until = INT_MAX,
         .provider = kProvider,
         .type_input = 0,
         .types = {DataType::Float, DataType::Float16, DataType::BFloat16},
         .create = make_factory<AttentionKernel>()});
}

}  // namespace onyx::cuda
