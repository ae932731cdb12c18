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

#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {
namespace {

const Tensor* opt_input(const KernelContext& ctx, int i) { return i < ctx.num_inputs() ? ctx.input(i) : nullptr; }

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

struct AttnGeom {
  bool three_d = false;
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, Snew = 0, P = 0, Skv = 0, Dq = 0, Dv = 0;
};

class AttentionKernel final : public Kernel {
 public:
  explicit AttentionKernel(const KernelInfo& info)
      : is_causal_(info.node.attr_int("is_causal", 0) != 0),
        q_heads_(info.node.attr_int("q_num_heads", 0)),
        kv_heads_(info.node.attr_int("kv_num_heads", 0)),
        mode_(info.node.attr_int("qk_matmul_output_mode", 0)),
        has_scale_(info.node.has_attr("scale")),
        scale_(info.node.attr_float("scale", 0.f)),
        softcap_(info.node.attr_float("softcap", 0.f)),
        softmax_dt_(static_cast<DataType>(info.node.attr_int("softmax_precision", 0))),
        left_(info.opset >= 25 ? info.node.attr_int("left_window_size", -1) : -1),
        right_(info.opset >= 25 ? info.node.attr_int("right_window_size", -1) : -1) {
    ONYX_CHECK(mode_ >= 0 && mode_ <= 3, "[{}] qk_matmul_output_mode should be 0..3 but is {}", info.label(), mode_);
    ONYX_CHECK(softmax_dt_ == DataType::Undefined || is_float(softmax_dt_),
               "[{}] softmax_precision should be a float type but is {}", info.label(), static_cast<int>(softmax_dt_));
    ONYX_CHECK(left_ >= -1 && right_ >= -1, "[{}] window sizes should be -1 or >= 0 but are {} and {}", info.label(),
               left_, right_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& q = ctx.required_input(0);
    const Tensor& k = ctx.required_input(1);
    const Tensor& v = ctx.required_input(2);
    const Tensor* mask = opt_input(ctx, 3);
    const Tensor* past_k = opt_input(ctx, 4);
    const Tensor* past_v = opt_input(ctx, 5);
    const Tensor* nonpad = opt_input(ctx, 6);
    const AttnGeom g = geometry(ctx, q, k, v, past_k, past_v);
    check_extras(ctx, g, q.dtype(), mask, nonpad, past_k);
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
    p.causal = is_causal_, p.left = left_, p.right = right_;
    const double scale = has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(g.Dq));
    p.q_scale = round_to(q.dtype(), std::sqrt(scale));
    p.softcap = softcap_ > 0 ? round_to(q.dtype(), softcap_) : 0.f;
    const DataType sm_dt = softmax_dt_ == DataType::Undefined ? q.dtype() : softmax_dt_;
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
        attn::launch_scores(*dt, p, static_cast<int>(mode_), qk.raw(), s);
        ONYX_CUDA_CHECK(cudaGetLastError());
      }
    }
  }

 private:
  AttnGeom geometry(const KernelContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* past_k,
                    const Tensor* past_v) const {
    const std::string who = ctx.label();
    ONYX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               "[{}] Q, K and V should have one dtype but are {}, {} and {}", who, dtype_name(q.dtype()),
               dtype_name(k.dtype()), dtype_name(v.dtype()));
    ONYX_CHECK((q.rank() == 3 || q.rank() == 4) && k.rank() == q.rank() && v.rank() == q.rank(),
               "[{}] Q, K and V should all be 3-D or all 4-D but have shapes {}, {} and {}", who, shape_str(q.shape()),
               shape_str(k.shape()), shape_str(v.shape()));
    AttnGeom g;
    g.three_d = q.rank() == 3;
    g.B = q.dim(0);
    ONYX_CHECK(k.dim(0) == g.B && v.dim(0) == g.B,
               "[{}] Q, K and V should have one batch size but have shapes {}, {} and {}", who, shape_str(q.shape()),
               shape_str(k.shape()), shape_str(v.shape()));
    int64_t dk = 0;
    if (g.three_d) {
      ONYX_CHECK(q_heads_ > 0 && kv_heads_ > 0,
                 "[{}] 3-D inputs need q_num_heads and kv_num_heads attributes (found {} and {})", who, q_heads_,
                 kv_heads_);
      ONYX_CHECK(q.dim(2) % q_heads_ == 0 && k.dim(2) % kv_heads_ == 0 && v.dim(2) % kv_heads_ == 0,
                 "[{}] hidden sizes of Q {}, K {} and V {} should divide by q_num_heads {} and kv_num_heads {}", who,
                 q.dim(2), k.dim(2), v.dim(2), q_heads_, kv_heads_);
      g.Hq = q_heads_, g.Hk = kv_heads_, g.Sq = q.dim(1), g.Snew = k.dim(1);
      g.Dq = q.dim(2) / q_heads_, dk = k.dim(2) / kv_heads_, g.Dv = v.dim(2) / kv_heads_;
      ONYX_CHECK(v.dim(1) == g.Snew, "[{}] K and V should have one sequence length but have {} and {}", who,
                 shape_str(k.shape()), shape_str(v.shape()));
    } else {
      g.Hq = q.dim(1), g.Hk = k.dim(1), g.Sq = q.dim(2), g.Snew = k.dim(2);
      g.Dq = q.dim(3), dk = k.dim(3), g.Dv = v.dim(3);
      ONYX_CHECK(v.dim(1) == g.Hk && v.dim(2) == g.Snew, "[{}] K {} and V {} should have the same heads and sequence length",
                 who, shape_str(k.shape()), shape_str(v.shape()));
    }
    ONYX_CHECK(dk == g.Dq, "[{}] Q and K should have one head size but have {} and {}", who, g.Dq, dk);
    ONYX_CHECK(g.Hk > 0 && g.Hq % g.Hk == 0, "[{}] q heads ({}) should be a multiple of kv heads ({})", who, g.Hq, g.Hk);
    ONYX_CHECK((past_k == nullptr) == (past_v == nullptr), "[{}] past_key and past_value should be given together", who);
    if (past_k) {
      ONYX_CHECK(past_k->dtype() == q.dtype() && past_v->dtype() == q.dtype(),
                 "[{}] past_key/past_value should be {} but are {} and {}", who, dtype_name(q.dtype()),
                 dtype_name(past_k->dtype()), dtype_name(past_v->dtype()));
      ONYX_CHECK(past_k->rank() == 4 && past_v->rank() == 4 && past_k->dim(0) == g.B && past_k->dim(1) == g.Hk &&
                     past_k->dim(3) == g.Dq && past_v->dim(0) == g.B && past_v->dim(1) == g.Hk &&
                     past_v->dim(2) == past_k->dim(2) && past_v->dim(3) == g.Dv,
                 "[{}] past_key {} and past_value {} should be [{}, {}, P, {}] and [{}, {}, P, {}]", who,
                 shape_str(past_k->shape()), shape_str(past_v->shape()), g.B, g.Hk, g.Dq, g.B, g.Hk, g.Dv);
      g.P = past_k->dim(2);
    }
    g.Skv = g.P + g.Snew;
    return g;
  }

  void check_extras(const KernelContext& ctx, const AttnGeom& g, DataType dt, const Tensor* mask, const Tensor* nonpad,
                    const Tensor* past_k) const {
    const std::string who = ctx.label();
    if (mask) {
      ONYX_CHECK(mask->dtype() == DataType::Bool || is_float(mask->dtype()),
                 "[{}] attn_mask should be bool or a float type like Q ({}) but is {}", who, dtype_name(dt),
                 dtype_name(mask->dtype()));
      const Shape target{g.B, g.Hq, g.Sq, g.Skv};
      bool ok = mask->rank() >= 1 && mask->rank() <= 4 && mask->dim(-1) <= g.Skv;
      for (int64_t i = 2; ok && i <= mask->rank(); ++i) {
        const int64_t d = mask->dim(-i);
        ok = d == 1 || d == target[4 - i];
      }
      ONYX_CHECK(ok, "[{}] attn_mask {} does not broadcast to [{}, {}, {}, <= {}]", who, shape_str(mask->shape()), g.B,
                 g.Hq, g.Sq, g.Skv);
    }
    if (nonpad) {
      ONYX_CHECK(!past_k, "[{}] nonpad_kv_seqlen cannot be combined with past_key/past_value", who);
      ONYX_CHECK(nonpad->dtype() == DataType::Int64 && nonpad->rank() == 1 && nonpad->dim(0) == g.B,
                 "[{}] nonpad_kv_seqlen should be int64 [{}] but is {} {}", who, g.B, dtype_name(nonpad->dtype()),
                 shape_str(nonpad->shape()));
    }
  }

  bool is_causal_;
  int64_t q_heads_, kv_heads_, mode_;
  bool has_scale_;
  float scale_, softcap_;
  DataType softmax_dt_;
  int64_t left_, right_;
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
