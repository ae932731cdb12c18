// Attention's attribute and shape checks (kernels/attention_geometry.h).
#include "kernels/attention_geometry.h"

#include <string>

namespace onyx {
namespace {

AttnGeom shapes(const KernelContext& ctx, const AttentionAttrs& a, const Tensor& q, const Tensor& k,
                const Tensor& v, const Tensor* past_k, const Tensor* past_v) {
  const std::string who = ctx.label();
  ONYX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "[{}] Q, K and V should have one dtype but are {}, {} and {}", who,
             dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  ONYX_CHECK((q.rank() == 3 || q.rank() == 4) && k.rank() == q.rank() && v.rank() == q.rank(),
             "[{}] Q, K and V should all be 3-D or all 4-D but have shapes {}, {} and {}", who,
             shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  AttnGeom g;
  g.three_d = q.rank() == 3;
  g.B = q.dim(0);
  ONYX_CHECK(k.dim(0) == g.B && v.dim(0) == g.B,
             "[{}] Q, K and V should have one batch size but have shapes {}, {} and {}", who,
             shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  int64_t dk = 0;
  if (g.three_d) {
    ONYX_CHECK(a.q_heads > 0 && a.kv_heads > 0,
               "[{}] 3-D inputs need q_num_heads and kv_num_heads attributes (found {} and {})",
               who, a.q_heads, a.kv_heads);
    ONYX_CHECK(q.dim(2) % a.q_heads == 0 && k.dim(2) % a.kv_heads == 0 &&
                   v.dim(2) % a.kv_heads == 0,
               "[{}] hidden sizes of Q {}, K {} and V {} should divide by q_num_heads {} and "
               "kv_num_heads {}",
               who, q.dim(2), k.dim(2), v.dim(2), a.q_heads, a.kv_heads);
    g.Hq = a.q_heads, g.Hk = a.kv_heads, g.Sq = q.dim(1), g.Snew = k.dim(1);
    g.Dq = q.dim(2) / a.q_heads, dk = k.dim(2) / a.kv_heads, g.Dv = v.dim(2) / a.kv_heads;
    ONYX_CHECK(v.dim(1) == g.Snew,
               "[{}] K and V should have one sequence length but have {} and {}", who,
               shape_str(k.shape()), shape_str(v.shape()));
  } else {
    g.Hq = q.dim(1), g.Hk = k.dim(1), g.Sq = q.dim(2), g.Snew = k.dim(2);
    g.Dq = q.dim(3), dk = k.dim(3), g.Dv = v.dim(3);
    ONYX_CHECK(v.dim(1) == g.Hk && v.dim(2) == g.Snew,
               "[{}] K {} and V {} should have the same heads and sequence length", who,
               shape_str(k.shape()), shape_str(v.shape()));
  }
  ONYX_CHECK(dk == g.Dq, "[{}] Q and K should have one head size but have {} and {}", who, g.Dq,
             dk);
  ONYX_CHECK(g.Hk > 0 && g.Hq % g.Hk == 0,
             "[{}] q heads ({}) should be a multiple of kv heads ({})", who, g.Hq, g.Hk);
  ONYX_CHECK((past_k == nullptr) == (past_v == nullptr),
             "[{}] past_key and past_value should be given together", who);
  if (past_k) {
    ONYX_CHECK(past_k->dtype() == q.dtype() && past_v->dtype() == q.dtype(),
               "[{}] past_key/past_value should be {} but are {} and {}", who,
               dtype_name(q.dtype()), dtype_name(past_k->dtype()), dtype_name(past_v->dtype()));
    ONYX_CHECK(
        past_k->rank() == 4 && past_v->rank() == 4 && past_k->dim(0) == g.B &&
            past_k->dim(1) == g.Hk && past_k->dim(3) == g.Dq && past_v->dim(0) == g.B &&
            past_v->dim(1) == g.Hk && past_v->dim(2) == past_k->dim(2) && past_v->dim(3) == g.Dv,
        "[{}] past_key {} and past_value {} should be [{}, {}, P, {}] and [{}, {}, P, {}]", who,
        shape_str(past_k->shape()), shape_str(past_v->shape()), g.B, g.Hk, g.Dq, g.B, g.Hk, g.Dv);
    g.P = past_k->dim(2);
  }
  g.Skv = g.P + g.Snew;
  return g;
}

void check_extras(const KernelContext& ctx, const AttnGeom& g, DataType dt, const Tensor* mask,
                  const Tensor* nonpad, const Tensor* past_k) {
  const std::string who = ctx.label();
  if (mask) {
    ONYX_CHECK(mask->dtype() == DataType::Bool || is_float(mask->dtype()),
               "[{}] attn_mask should be bool or a float type like Q ({}) but is {}", who,
               dtype_name(dt), dtype_name(mask->dtype()));
    const Shape target{g.B, g.Hq, g.Sq, g.Skv};
    bool ok = mask->rank() >= 1 && mask->rank() <= 4 && mask->dim(-1) <= g.Skv;
    for (int64_t i = 2; ok && i <= mask->rank(); ++i) {
      const int64_t d = mask->dim(-i);
      ok = d == 1 || d == target[4 - i];
    }
    ONYX_CHECK(ok, "[{}] attn_mask {} does not broadcast to [{}, {}, {}, <= {}]", who,
               shape_str(mask->shape()), g.B, g.Hq, g.Sq, g.Skv);
  }
  if (nonpad) {
    ONYX_CHECK(!past_k, "[{}] nonpad_kv_seqlen cannot be combined with past_key/past_value", who);
    ONYX_CHECK(nonpad->dtype() == DataType::Int64 && nonpad->rank() == 1 && nonpad->dim(0) == g.B,
               "[{}] nonpad_kv_seqlen should be int64 [{}] but is {} {}", who, g.B,
               dtype_name(nonpad->dtype()), shape_str(nonpad->shape()));
  }
}

}  // namespace

AttentionAttrs::AttentionAttrs(const KernelInfo& info)
    : is_causal(info.node.attr_int("is_causal", 0) != 0),
      q_heads(info.node.attr_int("q_num_heads", 0)),
      kv_heads(info.node.attr_int("kv_num_heads", 0)),
      mode(info.node.attr_int("qk_matmul_output_mode", 0)),
      has_scale(info.node.has_attr("scale")),
      scale(info.node.attr_float("scale", 0.f)),
      softcap(info.node.attr_float("softcap", 0.f)),
      softmax_dt(static_cast<DataType>(info.node.attr_int("softmax_precision", 0))),
      left(info.opset >= 25 ? info.node.attr_int("left_window_size", -1) : -1),
      right(info.opset >= 25 ? info.node.attr_int("right_window_size", -1) : -1) {
  ONYX_CHECK(mode >= 0 && mode <= 3, "[{}] qk_matmul_output_mode should be 0..3 but is {}",
             info.label(), mode);
  ONYX_CHECK(softmax_dt == DataType::Undefined || is_float(softmax_dt),
             "[{}] softmax_precision should be a float type but is {}", info.label(),
             static_cast<int>(softmax_dt));
  ONYX_CHECK(left >= -1 && right >= -1, "[{}] window sizes should be -1 or >= 0 but are {} and {}",
             info.label(), left, right);
}

AttnGeom attention_geometry(const KernelContext& ctx, const AttentionAttrs& a) {
  const Tensor& q = ctx.required_input(0);
  const Tensor* past_k = opt_input(ctx, 4);
  const AttnGeom g = shapes(ctx, a, q, ctx.required_input(1), ctx.required_input(2), past_k,
                            opt_input(ctx, 5));
  check_extras(ctx, g, q.dtype(), opt_input(ctx, 3), opt_input(ctx, 6), past_k);
  return g;
}

}  // namespace onyx
