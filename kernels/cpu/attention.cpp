// Attention (opset 23+): scaled dot-product attention over 3-D or 4-D Q/K/V with grouped KV
// heads, boolean or additive masks, offset-aligned causal and sliding-window masks, a KV cache
// (past/present) or per-batch valid KV lengths, softcap, and the qk_matmul_output debug output.
// Intermediates are rounded to the input dtype where the ONNX function body rounds them, so
// float16 results match the reference. RotaryEmbedding (opset 23) rotates head channels.
#include <climits>
#include <cmath>
#include <limits>

#include "kernels/attention_geometry.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/small_gemm.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// x rounded to T's precision and back, as the reference does when it stores a T value.
template <typename T, typename A>
A rnd(A x) {
  if constexpr (std::is_same_v<T, A>)
    return x;
  else
    return static_cast<A>(static_cast<T>(x));
}

/// Where a head's rows live in a 3-D ([B, S, H*D]) or 4-D ([B, H, S, D]) tensor.
struct HeadView {
  int64_t batch, head, row;  // element strides; channels are contiguous
  static HeadView of(bool three_d, int64_t heads, int64_t seq, int64_t dim) {
    if (three_d) return {seq * heads * dim, dim, heads * dim};
    return {heads * seq * dim, seq * dim, dim};
  }
  int64_t at(int64_t b, int64_t h, int64_t s) const { return b * batch + h * head + s * row; }
};

/// In-place softmax of a row in precision P, as the reference computes it: a row whose
/// maximum is -inf gives zeros, a NaN anywhere gives NaNs.
template <typename P, typename A>
void softmax_row(A* x, int64_t n) {
  using C = acc_t<P>;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const C v = static_cast<C>(static_cast<P>(x[j]));
    if (std::isnan(v) || v > m) m = v;
    if (std::isnan(m)) break;
  }
  if (std::isinf(m) && m < 0) m = C(0);
  C s = C(0);
  for (int64_t j = 0; j < n; ++j) {
    const C e = std::exp(static_cast<C>(static_cast<P>(x[j])) - m);
    x[j] = static_cast<A>(e);
    s += e;
  }
  if (s == C(0)) s = C(1);
  for (int64_t j = 0; j < n; ++j) x[j] = static_cast<A>(static_cast<P>(static_cast<C>(x[j]) / s));
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

    const Shape present_k_shape{g.B, g.Hk, g.Skv, g.Dq}, present_v_shape{g.B, g.Hk, g.Skv, g.Dv};
    Tensor pk = ctx.num_outputs() > 1 && ctx.output_wanted(1)
                    ? ctx.allocate_output(1, q.dtype(), present_k_shape)
                    : ctx.scratch(q.dtype(), present_k_shape);
    Tensor pv = ctx.num_outputs() > 2 && ctx.output_wanted(2)
                    ? ctx.allocate_output(2, q.dtype(), present_v_shape)
                    : ctx.scratch(q.dtype(), present_v_shape);
    Tensor& y = ctx.allocate_output(
        0, q.dtype(), g.three_d ? Shape{g.B, g.Sq, g.Hq * g.Dv} : Shape{g.B, g.Hq, g.Sq, g.Dv});
    Tensor* qk_out = nullptr;
    if (ctx.num_outputs() > 3 && ctx.output_wanted(3))
      qk_out = &ctx.allocate_output(3, q.dtype(), {g.B, g.Hq, g.Sq, g.Skv});

    dispatch<FloatTypes>(q.dtype(), ctx.label(), [&]<typename T>() {
      concat_cache<T>(g, past_k, k, g.Dq, pk);
      concat_cache<T>(g, past_v, v, g.Dv, pv);
      run<T>(ctx, g, q, pk, pv, mask, nonpad, past_k != nullptr, y, qk_out);
    });
  }

 private:
  /// present = concat(past, new) along the sequence axis, in [B, Hk, Skv, D].
  template <typename T>
  static void concat_cache(const AttnGeom& g, const Tensor* past, const Tensor& cur, int64_t D,
                           Tensor& present) {
    T* out = present.data<T>();
    const T* pp = past ? past->data<T>() : nullptr;
    const T* cp = cur.data<T>();
    const HeadView cv = HeadView::of(g.three_d, g.Hk, g.Snew, D);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t h = 0; h < g.Hk; ++h) {
        T* dst = out + (b * g.Hk + h) * g.Skv * D;
        if (pp) std::copy_n(pp + (b * g.Hk + h) * g.P * D, g.P * D, dst);
        for (int64_t s = 0; s < g.Snew; ++s)
          std::copy_n(cp + cv.at(b, h, s), D, dst + (g.P + s) * D);
      }
  }

  /// Additive bias of one (batch, q head) block, [Sq, Skv]: mask, causal, window, padding.
  template <typename A>
  void fill_bias(const AttnGeom& g, int64_t b, int64_t h, const Tensor* mask, const int64_t* nonpad,
                 bool has_past, A* bias) const {
    const A ninf = -std::numeric_limits<A>::infinity();
    std::fill_n(bias, g.Sq * g.Skv, A(0));
    if (mask) {
      const int64_t r = mask->rank(), lm = mask->dim(-1);
      int64_t st[4] = {0, 0, 0, 0}, stride = 1;  // strides over [B, H, Sq, Lm], 0 = broadcast
      for (int64_t i = 1; i <= r; ++i) {
        st[4 - i] = mask->dim(-i) == 1 ? 0 : stride;
        stride *= mask->dim(-i);
      }
      if (lm == 1) st[3] = 0;
      const int64_t base = b * st[0] + h * st[1];
      dispatch<TypeList<bool, float, double, float16, bfloat16>>(
          mask->dtype(), "Attention", [&]<typename M>() {
            const M* m = mask->data<M>();
            for (int64_t i = 0; i < g.Sq; ++i)
              for (int64_t j = 0; j < g.Skv; ++j) {
                A val = ninf;  // keys past the mask's last axis are masked
                if (j < lm) {
                  const M mv = m[base + i * st[2] + j * st[3]];
                  if constexpr (std::is_same_v<M, bool>)
                    val = mv ? A(0) : ninf;
                  else
                    val = static_cast<A>(mv);
                }
                bias[i * g.Skv + j] = val;
              }
          });
    }
    const bool window = attrs_.left >= 0 || attrs_.right >= 0;
    if (!attrs_.is_causal && !window && !nonpad) return;
    const int64_t offset = nonpad && !has_past ? nonpad[b] - g.Sq : g.P;
    for (int64_t i = 0; i < g.Sq; ++i)
      for (int64_t j = 0; j < g.Skv; ++j) {
        const int64_t diff = i + offset - j;
        bool allowed = !attrs_.is_causal || diff >= 0;
        if (attrs_.left >= 0) allowed = allowed && diff <= attrs_.left;
        if (attrs_.right >= 0) allowed = allowed && -diff <= attrs_.right;
        if (nonpad) allowed = allowed && j < nonpad[b];
        if (!allowed) bias[i * g.Skv + j] += ninf;
      }
  }

  template <typename T>
  void run(KernelContext& ctx, const AttnGeom& g, const Tensor& qt, const Tensor& pk,
           const Tensor& pv, const Tensor* mask, const Tensor* nonpad_t, bool has_past, Tensor& yt,
           Tensor* qk_out) const {
    using A = acc_t<T>;
    const A ninf = -std::numeric_limits<A>::infinity();
    const double scale =
        attrs_.has_scale ? attrs_.scale : 1.0 / std::sqrt(static_cast<double>(g.Dq));
    // Q and K are each scaled by sqrt(scale) (rounded to T), as in the function body.
    const A sq = static_cast<A>(static_cast<T>(std::sqrt(scale)));
    const A cap = static_cast<A>(static_cast<T>(attrs_.softcap));
    const T* q = qt.data<T>();
    const T* kp = pk.data<T>();
    const T* vp = pv.data<T>();
    T* y = yt.data<T>();
    T* qk = qk_out ? qk_out->data<T>() : nullptr;
    const int64_t* nonpad = nonpad_t ? nonpad_t->data<int64_t>() : nullptr;
    const HeadView qv = HeadView::of(g.three_d, g.Hq, g.Sq, g.Dq);
    const HeadView yv = HeadView::of(g.three_d, g.Hq, g.Sq, g.Dv);
    const int64_t rep = g.Hq / g.Hk;
    const DataType sm_dt =
        attrs_.softmax_dt == DataType::Undefined ? qt.dtype() : attrs_.softmax_dt;
    dnnl_util::ThreadScope threads(1);
    parallel_for(g.B * g.Hq, ctx.threads(), 1, [&](int64_t t0, int64_t t1) {
      std::vector<A> qs(g.Sq * g.Dq), ks(g.Skv * g.Dq), vs(g.Skv * g.Dv), s(g.Sq * g.Skv),
          bias(g.Sq * g.Skv), out(g.Sq * g.Dv);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / g.Hq, h = t % g.Hq, hk = h / rep;
        for (int64_t i = 0; i < g.Sq; ++i)
          for (int64_t d = 0; d < g.Dq; ++d)
            qs[i * g.Dq + d] = rnd<T>(static_cast<A>(q[qv.at(b, h, i) + d]) * sq);
        const T* kh = kp + (b * g.Hk + hk) * g.Skv * g.Dq;
        for (int64_t i = 0; i < g.Skv * g.Dq; ++i) ks[i] = rnd<T>(static_cast<A>(kh[i]) * sq);
        gemm(true, g.Sq, g.Skv, g.Dq, qs.data(), g.Dq, ks.data(), g.Dq, A(0), s.data(), g.Skv);
        for (A& x : s) x = rnd<T>(x);
        if (attrs_.softcap > 0)
          for (A& x : s) x = rnd<T>(rnd<T>(std::tanh(rnd<T>(x / cap))) * cap);
        fill_bias(g, b, h, mask, nonpad, has_past, bias.data());
        T* qk_blk = qk ? qk + t * g.Sq * g.Skv : nullptr;
        if (qk_blk && attrs_.mode <= 1)
          for (int64_t i = 0; i < g.Sq * g.Skv; ++i) qk_blk[i] = static_cast<T>(s[i]);
        for (int64_t i = 0; i < g.Sq * g.Skv; ++i) s[i] = rnd<T>(s[i] + bias[i]);
        if (qk_blk && attrs_.mode == 2)
          for (int64_t i = 0; i < g.Sq * g.Skv; ++i) qk_blk[i] = static_cast<T>(s[i]);
        for (int64_t i = 0; i < g.Sq; ++i) {
          A* row = s.data() + i * g.Skv;
          dispatch<FloatTypes>(sm_dt, "Attention",
                               [&]<typename P>() { softmax_row<P>(row, g.Skv); });
          // A row whose bias masks every key attends nothing: zeros, not NaN.
          const A* brow = bias.data() + i * g.Skv;
          A bmax = ninf;
          bool nan = false;
          for (int64_t j = 0; j < g.Skv; ++j)
            nan |= std::isnan(brow[j]), bmax = std::max(bmax, brow[j]);
          if (!nan && bmax == ninf) std::fill_n(row, g.Skv, A(0));
          for (int64_t j = 0; j < g.Skv; ++j) row[j] = rnd<T>(row[j]);
        }
        if (qk_blk && attrs_.mode == 3)
          for (int64_t i = 0; i < g.Sq * g.Skv; ++i) qk_blk[i] = static_cast<T>(s[i]);
        const T* vh = vp + (b * g.Hk + hk) * g.Skv * g.Dv;
        for (int64_t i = 0; i < g.Skv * g.Dv; ++i) vs[i] = static_cast<A>(vh[i]);
        gemm(false, g.Sq, g.Dv, g.Skv, s.data(), g.Skv, vs.data(), g.Dv, A(0), out.data(), g.Dv);
        for (int64_t i = 0; i < g.Sq; ++i)
          for (int64_t d = 0; d < g.Dv; ++d)
            y[yv.at(b, h, i) + d] = static_cast<T>(out[i * g.Dv + d]);
      }
    });
  }

  AttentionAttrs attrs_;
};

class RotaryEmbeddingKernel final : public Kernel {
 public:
  explicit RotaryEmbeddingKernel(const KernelInfo& info)
      : interleaved_(info.node.attr_int("interleaved", 0) != 0),
        rotary_dim_(info.node.attr_int("rotary_embedding_dim", 0)),
        num_heads_(info.node.attr_int("num_heads", 0)) {}

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& x = ctx.required_input(0);
    const Tensor& cos = ctx.required_input(1);
    const Tensor& sin = ctx.required_input(2);
    const Tensor* pos = opt_input(ctx, 3);
    ONYX_CHECK(x.rank() == 3 || x.rank() == 4, "[{}] input should be 3-D or 4-D but is {}", who,
               shape_str(x.shape()));
    ONYX_CHECK(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(),
               "[{}] cos_cache and sin_cache should be {} but are {} and {}", who,
               dtype_name(x.dtype()), dtype_name(cos.dtype()), dtype_name(sin.dtype()));
    const bool three_d = x.rank() == 3;
    const int64_t B = x.dim(0);
    int64_t H, S, D;
    if (three_d) {
      ONYX_CHECK(
          num_heads_ > 0 && x.dim(2) % num_heads_ == 0,
          "[{}] 3-D input {} needs a num_heads attribute dividing its hidden size (found {})", who,
          shape_str(x.shape()), num_heads_);
      H = num_heads_, S = x.dim(1), D = x.dim(2) / num_heads_;
    } else {
      H = x.dim(1), S = x.dim(2), D = x.dim(3);
    }
    const int64_t rd = rotary_dim_ > 0 ? rotary_dim_ : D;
    ONYX_CHECK(rd <= D && rd % 2 == 0, "[{}] rotary_embedding_dim {} should be even and <= {}", who,
               rd, D);
    const int64_t half = rd / 2;
    ONYX_CHECK(cos.shape() == sin.shape() && cos.rank() >= 2 && cos.dim(-1) == half,
               "[{}] cos_cache {} and sin_cache {} should match, with last axis {}", who,
               shape_str(cos.shape()), shape_str(sin.shape()), half);
    std::vector<int64_t> rows(B * S);  // cache row of each (batch, position)
    if (pos) {
      ONYX_CHECK(
          pos->dtype() == DataType::Int64 && pos->shape() == Shape({B, S}) && cos.rank() == 2,
          "[{}] position_ids should be int64 [{}, {}] with 2-D caches but is {} {}", who, B, S,
          dtype_name(pos->dtype()), shape_str(pos->shape()));
      const int64_t* p = pos->data<int64_t>();
      for (int64_t i = 0; i < B * S; ++i) {
        ONYX_CHECK(p[i] >= 0 && p[i] < cos.dim(0),
                   "[{}] position id {} is outside the cache of {} positions", who, p[i],
                   cos.dim(0));
        rows[i] = p[i];
      }
    } else {
      ONYX_CHECK(cos.rank() == 3 && cos.dim(0) == B && cos.dim(1) == S,
                 "[{}] without position_ids the caches should be [{}, {}, {}] but are {}", who, B,
                 S, half, shape_str(cos.shape()));
      for (int64_t i = 0; i < B * S; ++i) rows[i] = i;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const HeadView xv = HeadView::of(three_d, H, S, D);
    dispatch<FloatTypes>(x.dtype(), who, [&]<typename T>() {
      using A = acc_t<T>;
      const T* xp = x.data<T>();
      const T* cp = cos.data<T>();
      const T* sp = sin.data<T>();
      T* yp = y.data<T>();
      parallel_for(B * H * S, ctx.threads(), std::max<int64_t>(1, 16384 / D),
                   [&](int64_t t0, int64_t t1) {
                     for (int64_t t = t0; t < t1; ++t) {
                       const int64_t b = t / (H * S), h = (t / S) % H, s = t % S;
                       const int64_t off = xv.at(b, h, s);
                       const T* src = xp + off;
                       T* dst = yp + off;
                       const T* c = cp + rows[b * S + s] * half;
                       const T* sn = sp + rows[b * S + s] * half;
                       for (int64_t i = 0; i < half; ++i) {
                         const int64_t i1 = interleaved_ ? 2 * i : i,
                                       i2 = interleaved_ ? 2 * i + 1 : i + half;
                         const A x1 = static_cast<A>(src[i1]), x2 = static_cast<A>(src[i2]);
                         const A cv = static_cast<A>(c[i]), sv = static_cast<A>(sn[i]);
                         dst[i1] = static_cast<T>(rnd<T>(cv * x1) - rnd<T>(sv * x2));
                         dst[i2] = static_cast<T>(rnd<T>(sv * x1) + rnd<T>(cv * x2));
                       }
                       std::copy(src + rd, src + D, dst + rd);
                     }
                   });
    });
  }

 private:
  bool interleaved_;
  int64_t rotary_dim_, num_heads_;
};

}  // namespace

void register_attention_kernels(KernelRegistry& r) {
  r.add({"Attention", "", 23, INT_MAX, "cpu", 0, float_types(), make_factory<AttentionKernel>()});
  r.add({"RotaryEmbedding",
         "",
         23,
         INT_MAX,
         "cpu",
         0,
         // Double beyond ONNX's constraint (graph/schema.cpp): float64 gradient checks.
         {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16},
         make_factory<RotaryEmbeddingKernel>()});
}

}  // namespace onyx::cpu
