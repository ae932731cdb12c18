// Attention (opset 23+) attributes and the checks of its inputs' dtypes and shapes, shared by
// every provider so that the CPU and the device refuse the same calls with the same messages.
#pragma once

#include "kernels/kernel.h"

namespace onyx {

struct AttentionAttrs {
  bool is_causal;
  int64_t q_heads, kv_heads, mode;  // mode: qk_matmul_output_mode, 0..3
  bool has_scale;
  float scale, softcap;
  DataType softmax_dt;  // Undefined: the input's
  int64_t left, right;  // sliding window (opset 25), -1 when unbounded
  explicit AttentionAttrs(const KernelInfo& info);
};

/// Everything about one call's shapes.
struct AttnGeom {
  bool three_d = false;
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, Snew = 0, P = 0, Skv = 0, Dq = 0, Dv = 0;
};

/// One call's geometry from Q, K, V, the optional past_key/past_value (inputs 4, 5), checked
/// with the optional attn_mask (3) and nonpad_kv_seqlen (6).
AttnGeom attention_geometry(const KernelContext& ctx, const AttentionAttrs& a);

}  // namespace onyx
