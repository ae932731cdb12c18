// LinearAttention: recurrent linear attention (linear, gated, delta and gated-delta rules)
// over packed [B, T, H*D] inputs with a [B, H_kv, d_k, d_v] state, computed in float.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using LinearAttentionTypes = TypeList<float, float16, bfloat16>;

/// Converts any float-like tensor of the op to a float vector.
std::vector<float> to_float(const Tensor& t, const std::string& who) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch<LinearAttentionTypes>(t.dtype(), who, [&]<typename T>() {
    const T* s = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(s[i]);
  });
  return out;
}

/// Writes float values into a tensor of the op's dtypes.
void from_float(const std::vector<float>& v, Tensor& t, const std::string& who) {
  dispatch<LinearAttentionTypes>(t.dtype(), who, [&]<typename T>() {
    T* d = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) d[i] = T(v[i]);
  });
}

class LinearAttentionKernel final : public Kernel {
 public:
  explicit LinearAttentionKernel(const KernelInfo& info) {
    const Node& n = info.node;
    q_heads_ = n.require_attr("q_num_heads", Attribute::Type::Int).i;
    kv_heads_ = n.require_attr("kv_num_heads", Attribute::Type::Int).i;
    ONYX_CHECK(q_heads_ > 0 && kv_heads_ > 0 && q_heads_ % kv_heads_ == 0,
               "[{}] q_num_heads ({}) must be a positive multiple of kv_num_heads ({})",
               info.label(), q_heads_, kv_heads_);
    scale_ = n.attr_float("scale", 0.0f);
    std::string rule = n.attr_string("update_rule", "gated_delta");
    ONYX_CHECK(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta",
               "[{}] update_rule should be linear, gated, delta or gated_delta but is '{}'",
               info.label(), rule);
    gated_ = rule == "gated" || rule == "gated_delta";
    delta_ = rule == "delta" || rule == "gated_delta";
  }

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& q = ctx.required_input(0);
    const Tensor& k = ctx.required_input(1);
    const Tensor& v = ctx.required_input(2);
    const Tensor* past = ctx.input(3);
    const Tensor* decay = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const Tensor* beta = ctx.num_inputs() > 5 ? ctx.input(5) : nullptr;
    for (const Tensor* t : {&q, &k, &v})
      ONYX_CHECK(t->rank() == 3 && t->dtype() == q.dtype(),
                 "[{}] query, key and value should be rank-3 {} [B, T, H*D] but one is {}{}", who,
                 dtype_name(q.dtype()), dtype_name(t->dtype()), shape_str(t->shape()));
    int64_t B = q.shape()[0], T = q.shape()[1];
    ONYX_CHECK(q.shape()[2] % q_heads_ == 0 && v.shape()[2] % kv_heads_ == 0,
               "[{}] query width {} / value width {} are not multiples of {} / {} heads", who,
               q.shape()[2], v.shape()[2], q_heads_, kv_heads_);
    int64_t dk = q.shape()[2] / q_heads_, dv = v.shape()[2] / kv_heads_;
    ONYX_CHECK(k.shape() == (Shape{B, T, kv_heads_ * dk}) && v.shape()[0] == B && v.shape()[1] == T,
               "[{}] key should be {} and value [{}, {}, H*d_v] but they are {} and {}", who,
               shape_str({B, T, kv_heads_ * dk}), B, T, shape_str(k.shape()), shape_str(v.shape()));
    ONYX_CHECK(gated_ == (decay != nullptr) && delta_ == (beta != nullptr),
               "[{}] the update rule needs decay {} and beta {}, but they are {} and {}", who,
               gated_ ? "given" : "omitted", delta_ ? "given" : "omitted",
               decay ? "given" : "omitted", beta ? "given" : "omitted");
    // A scalar decay or beta has no last dim: its width reads 0 and the rank check names it.
    int64_t decay_w = decay && decay->rank() > 0 ? decay->shape().back() : 0;
    int64_t beta_w = beta && beta->rank() > 0 ? beta->shape().back() : 0;
    if (decay)
      ONYX_CHECK(decay->rank() == 3 && decay->shape()[0] == B && decay->shape()[1] == T &&
                     (decay_w == kv_heads_ || decay_w == kv_heads_ * dk),
                 "[{}] decay should be [{}, {}, {} or {}] but is {}", who, B, T, kv_heads_,
                 kv_heads_ * dk, shape_str(decay->shape()));
    if (beta)
      ONYX_CHECK(beta->rank() == 3 && beta->shape()[0] == B && beta->shape()[1] == T &&
                     (beta_w == kv_heads_ || beta_w == 1),
                 "[{}] beta should be [{}, {}, {} or 1] but is {}", who, B, T, kv_heads_,
                 shape_str(beta->shape()));
    Shape state_shape{B, kv_heads_, dk, dv};
    if (past)
      ONYX_CHECK(past->shape() == state_shape, "[{}] past_state should be {} but is {}", who,
                 shape_str(state_shape), shape_str(past->shape()));

    std::vector<float> qf = to_float(q, who), kf = to_float(k, who), vf = to_float(v, who);
    std::vector<float> gf = decay ? to_float(*decay, who) : std::vector<float>{};
    std::vector<float> bf = beta ? to_float(*beta, who) : std::vector<float>{};
    std::vector<float> state =
        past ? to_float(*past, who)
             : std::vector<float>(static_cast<size_t>(shape_numel(state_shape)));
    std::vector<float> out(static_cast<size_t>(B * T * q_heads_ * dv));
    float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(dk));
    int64_t group = q_heads_ / kv_heads_;

    parallel_for(B * kv_heads_, ctx.threads(), 1, [&](int64_t first, int64_t last) {
      std::vector<float> vt(static_cast<size_t>(dv));
      for (int64_t bh = first; bh < last; ++bh) {
        int64_t b = bh / kv_heads_, h = bh % kv_heads_;
        float* S = state.data() + bh * dk * dv;
        for (int64_t t = 0; t < T; ++t) {
          int64_t bt = b * T + t;
          const float* kt = kf.data() + (bt * kv_heads_ + h) * dk;
          const float* vin = vf.data() + (bt * kv_heads_ + h) * dv;
          if (gated_) {
            for (int64_t d = 0; d < dk; ++d) {
              float g =
                  decay_w == kv_heads_ ? gf[bt * kv_heads_ + h] : gf[(bt * kv_heads_ + h) * dk + d];
              float f = std::exp(g);
              for (int64_t m = 0; m < dv; ++m) S[d * dv + m] *= f;
            }
          }
          for (int64_t m = 0; m < dv; ++m) vt[m] = vin[m];
          if (delta_) {
            // v_t <- beta (v_t - S^T k_t): write only what the state does not already recall.
            float bt_val = bf[bt * beta_w + (beta_w == 1 ? 0 : h)];
            for (int64_t m = 0; m < dv; ++m) {
              float r = 0;
              for (int64_t d = 0; d < dk; ++d) r += S[d * dv + m] * kt[d];
              vt[m] = bt_val * (vt[m] - r);
            }
          }
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += kt[d] * vt[m];
          for (int64_t g = 0; g < group; ++g) {
            int64_t hq = h * group + g;
            const float* qt = qf.data() + (bt * q_heads_ + hq) * dk;
            float* o = out.data() + (bt * q_heads_ + hq) * dv;
            for (int64_t m = 0; m < dv; ++m) o[m] = 0;
            for (int64_t d = 0; d < dk; ++d)
              for (int64_t m = 0; m < dv; ++m) o[m] += qt[d] * S[d * dv + m];
            for (int64_t m = 0; m < dv; ++m) o[m] *= scale;
          }
        }
      }
    });
    Tensor& y = ctx.allocate_output(0, q.dtype(), {B, T, q_heads_ * dv});
    from_float(out, y, who);
    Tensor& present = ctx.allocate_output(1, past ? past->dtype() : q.dtype(), state_shape);
    from_float(state, present, who);
  }

 private:
  int64_t q_heads_ = 1, kv_heads_ = 1;
  float scale_ = 0.0f;
  bool gated_ = true, delta_ = true;
};

}  // namespace

void register_linear_attention_kernels(KernelRegistry& r) {
  r.add({"LinearAttention",
         "",
         27,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float, DataType::Float16, DataType::BFloat16},
         make_factory<LinearAttentionKernel>()});
}

}  // namespace onyx::cpu
