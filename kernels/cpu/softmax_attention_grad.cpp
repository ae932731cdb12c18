// ai.onyx SoftmaxAttentionGrad: the backward of O = Softmax(alpha-scaled Q Kt [+ mask]) V for
// one (batch, head) matrix at a time, whose [Sq, Skv] intermediates stay in the core's cache.
// Training differentiates an attention spelling as one unit (autodiff/attention_spelling.cpp),
// writing about a dozen plain nodes, each a pass over a [B, H, Sq, Skv] tensor through memory;
// the optimizer's fuse_softmax_attention_grad (inference/fusions_attention_grad.cpp) swaps them
// for this kernel.
//
//   inputs:  dO [..., Sq, Dv], P [..., Sq, Skv] (the probabilities), V [..., Skv, Dv],
//            Q [..., Sq, D] (for dKt), Kt [..., D, Skv] (for dQ), alpha (one element; 1 when
//            omitted)
//   outputs: dQ, dKt, dV (each optional)
//   dV = P^T dO;  dP = dO V^T;  dX = (dP - rowsum(dP * P)) * P * alpha;
//   dQ = dX Kt^T;  dKt = Q^T dX
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// Row-major C[M, N] = op(A) op(B) on the calling thread (oneDNN's sgemm).
void sgemm(const char* who, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // an empty sum (no keys, or zero-width heads)
    for (int64_t i = 0; i < M; ++i) std::fill_n(C + i * ldc, N, 0.f);
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.f, A, lda, B, ldb,
                                      0.f, C, ldc);
  ONYX_CHECK(st == dnnl_success, "[{}] oneDNN sgemm failed with status {} (M={} N={} K={})", who,
             static_cast<int>(st), M, N, K);
}

/// Asks for the cache lines of p[0, n) into L2: the next head's operands, which the forward
/// wrote long before, while this head computes (sgemm's packing would meet them cold).
void prefetch_l2(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}

/// Where each matrix of `t` starts, for every index of `batch` (t's leading dims broadcast to it:
/// a dim of 1 repeats its matrix).
std::vector<const float*> batch_starts(const Shape& batch, const Tensor& t) {
  const auto nd = static_cast<int64_t>(batch.size());
  std::vector<int64_t> stride(nd);
  int64_t st = t.dim(-2) * t.dim(-1);
  for (int64_t i = nd - 1; i >= 0; --i) {
    stride[i] = t.dim(i) == 1 ? 0 : st;
    st *= t.dim(i);
  }
  std::vector<const float*> out(shape_numel(batch));
  for (int64_t b = 0; b < static_cast<int64_t>(out.size()); ++b) {
    int64_t rem = b, off = 0;
    for (int64_t i = nd - 1; i >= 0; --i) {
      off += rem % batch[i] * stride[i];
      rem /= batch[i];
    }
    out[b] = t.data<float>() + off;
  }
  return out;
}

/// dX = (dP - rowsum(dP * P)) * P * alpha over rows of n, in place of dP.
void softmax_backward_rows(float* dp, const float* p, int64_t rows, int64_t n, float alpha) {
  for (int64_t i = 0; i < rows; ++i) {
    float* d = dp + i * n;
    const float* pr = p + i * n;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += d[j] * pr[j];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) d[j] = (d[j] - s) * pr[j] * alpha;
  }
}

class SoftmaxAttentionGradKernel final : public Kernel {
 public:
  explicit SoftmaxAttentionGradKernel(const KernelInfo&) {}

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& dO = ctx.required_input(0);
    const Tensor& P = ctx.required_input(1);
    const Tensor& V = ctx.required_input(2);
    const Tensor* Q = opt_input(ctx, 3);
    const Tensor* Kt = opt_input(ctx, 4);
    const Tensor* alpha_t = opt_input(ctx, 5);
    auto wanted = [&](int i) { return i < ctx.num_outputs() && ctx.output_wanted(i); };
    const bool want_dq = wanted(0), want_dk = wanted(1), want_dv = wanted(2);

    // Everything is checked before an output is allocated. The batch is dO's: every operand's
    // batch dims equal its dims or are 1 (MatMul's broadcasting, with one rank).
    const int64_t r = dO.rank();
    ONYX_CHECK(r >= 2, "[{}] dO should have rank >= 2 but is {}", who, shape_str(dO.shape()));
    const Shape batch(dO.shape().begin(), dO.shape().end() - 2);
    const int64_t S = dO.dim(-2), Dv = dO.dim(-1);
    const int64_t Skv = P.rank() == r ? P.dim(-1) : -1;
    const int64_t D = Kt && Kt->rank() == r ? Kt->dim(-2) : Q && Q->rank() == r ? Q->dim(-1) : 0;
    auto check = [&](const Tensor* t, const char* name, int64_t rows, int64_t cols) {
      if (!t) return;
      bool ok = t->dtype() == DataType::Float && t->rank() == r && t->dim(-2) == rows && t->dim(-1) == cols;
      for (int64_t i = 0; ok && i + 2 < r; ++i) ok = t->dim(i) == batch[i] || t->dim(i) == 1;
      Shape want = batch;
      want.push_back(rows);
      want.push_back(cols);
      ONYX_CHECK(ok, "[{}] {} should be float {} (batch dims may be 1) but is {} {}", who, name,
                 shape_str(want), dtype_name(t->dtype()), shape_str(t->shape()));
    };
    ONYX_CHECK(dO.dtype() == DataType::Float, "[{}] dO should be float but is {}", who,
               dtype_name(dO.dtype()));
    check(&P, "P", S, Skv);
    check(&V, "V", Skv, Dv);
    ONYX_CHECK(!want_dq || Kt, "[{}] dQ needs Kt (input 4)", who);
    ONYX_CHECK(!want_dk || Q, "[{}] dKt needs Q (input 3)", who);
    check(Kt, "Kt", D, Skv);
    check(Q, "Q", S, D);
    float alpha = 1.f;
    if (alpha_t) {
      ONYX_CHECK(alpha_t->dtype() == DataType::Float && alpha_t->numel() == 1,
                 "[{}] alpha should be one float value but is {} {}", who,
                 dtype_name(alpha_t->dtype()), shape_str(alpha_t->shape()));
      alpha = *alpha_t->data<float>();
    }

    auto output = [&](int i, int64_t rows, int64_t cols) {
      Shape s = batch;
      s.push_back(rows);
      s.push_back(cols);
      return ctx.allocate_output(i, DataType::Float, s).data<float>();
    };
    float* dq = want_dq ? output(0, S, D) : nullptr;
    float* dk = want_dk ? output(1, D, Skv) : nullptr;
    float* dv = want_dv ? output(2, Skv, Dv) : nullptr;
    const int64_t nb = shape_numel(batch);
    const bool want_dx = want_dq || want_dk;
    const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), nb)));
    Tensor scratch = want_dx ? ctx.scratch(DataType::Float, {threads, S * Skv}) : Tensor();
    const float* po = dO.data<float>();
    using Starts = std::vector<const float*>;
    const Starts p_at = batch_starts(batch, P), v_at = batch_starts(batch, V);
    const Starts q_at = Q ? batch_starts(batch, *Q) : Starts();
    const Starts k_at = Kt ? batch_starts(batch, *Kt) : Starts();
    // One batch-head per task; oneDNN's sgemm runs on the task's thread.
    dnnl_util::ThreadScope one(1);
    parallel_for(nb, threads, 1, [&](int64_t b0, int64_t b1) {
      // parallel_for's chunks are contiguous, at most ceil(nb / threads) long: one slot each.
      const int64_t slot = b0 / ((nb + threads - 1) / threads);
      float* dp = want_dx ? scratch.data<float>() + slot * S * Skv : nullptr;
      for (int64_t b = b0; b < b1; ++b) {
        const float* o = po + b * S * Dv;
        const float* p = p_at[b];
        const float* v = v_at[b];
        if (b + 1 < b1) {
          prefetch_l2(p_at[b + 1], S * Skv);
          prefetch_l2(o + S * Dv, S * Dv);
          prefetch_l2(v_at[b + 1], Skv * Dv);
          if (dq) prefetch_l2(k_at[b + 1], D * Skv);
          if (dk) prefetch_l2(q_at[b + 1], S * D);
        }
        if (dv) sgemm(who.c_str(), true, false, Skv, Dv, S, p, Skv, o, Dv, dv + b * Skv * Dv, Dv);
        if (!want_dx) continue;
        sgemm(who.c_str(), false, true, S, Skv, Dv, o, Dv, v, Dv, dp, Skv);
        softmax_backward_rows(dp, p, S, Skv, alpha);
        if (dq) sgemm(who.c_str(), false, true, S, D, Skv, dp, Skv, k_at[b], Skv, dq + b * S * D, D);
        if (dk) sgemm(who.c_str(), true, false, D, Skv, S, q_at[b], D, dp, Skv, dk + b * D * Skv, Skv);
      }
    });
  }
};

}  // namespace

void register_softmax_attention_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "SoftmaxAttentionGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<SoftmaxAttentionGradKernel>(i);
         }});
}

}  // namespace onyx::cpu
