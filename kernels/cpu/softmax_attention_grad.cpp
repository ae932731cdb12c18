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

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// Row-major C[M, N] = op(A) op(B) on the calling thread (oneDNN's sgemm).
void sgemm(const char* who, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
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

    // Everything is checked before an output is allocated.
    const int64_t r = P.rank();
    ONYX_CHECK(r >= 2, "[{}] P should have rank >= 2 but is {}", who, shape_str(P.shape()));
    const int64_t S = P.dim(-2), Skv = P.dim(-1), Dv = V.dim(-1);
    const Shape batch(P.shape().begin(), P.shape().end() - 2);
    auto check = [&](const Tensor* t, const char* name, int64_t rows, int64_t cols) {
      if (!t) return;
      Shape want = batch;
      want.push_back(rows < 0 ? (t->rank() >= 2 ? t->dim(-2) : -1) : rows);
      want.push_back(cols < 0 ? (t->rank() >= 1 ? t->dim(-1) : -1) : cols);
      ONYX_CHECK(t->dtype() == DataType::Float && t->shape() == want,
                 "[{}] {} should be float {} but is {} {}", who, name, shape_str(want),
                 dtype_name(t->dtype()), shape_str(t->shape()));
    };
    ONYX_CHECK(P.dtype() == DataType::Float, "[{}] P should be float but is {}", who,
               dtype_name(P.dtype()));
    check(&V, "V", Skv, -1);
    check(&dO, "dO", S, Dv);
    ONYX_CHECK(!want_dq || Kt, "[{}] dQ needs Kt (input 4)", who);
    ONYX_CHECK(!want_dk || Q, "[{}] dKt needs Q (input 3)", who);
    check(Kt, "Kt", -1, Skv);
    const int64_t D = Kt ? Kt->dim(-2) : Q ? Q->dim(-1) : 0;
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
    const float *po = dO.data<float>(), *pp = P.data<float>(), *pv = V.data<float>();
    const float* pq = Q ? Q->data<float>() : nullptr;
    const float* pk = Kt ? Kt->data<float>() : nullptr;
    // One batch-head per task; oneDNN's sgemm runs on the task's thread.
    dnnl_util::ThreadScope one(1);
    parallel_for(nb, threads, 1, [&](int64_t b0, int64_t b1) {
      // parallel_for's chunks are contiguous, at most ceil(nb / threads) long: one slot each.
      const int64_t slot = b0 / ((nb + threads - 1) / threads);
      float* dp = want_dx ? scratch.data<float>() + slot * S * Skv : nullptr;
      for (int64_t b = b0; b < b1; ++b) {
        const float* o = po + b * S * Dv;
        const float* p = pp + b * S * Skv;
        if (b + 1 < b1) {
          prefetch_l2(p + S * Skv, S * Skv);
          prefetch_l2(o + S * Dv, S * Dv);
          prefetch_l2(pv + (b + 1) * Skv * Dv, Skv * Dv);
          if (dq) prefetch_l2(pk + (b + 1) * D * Skv, D * Skv);
          if (dk) prefetch_l2(pq + (b + 1) * S * D, S * D);
        }
        if (dv) sgemm(who.c_str(), true, false, Skv, Dv, S, p, Skv, o, Dv, dv + b * Skv * Dv, Dv);
        if (!want_dx) continue;
        sgemm(who.c_str(), false, true, S, Skv, Dv, o, Dv, pv + b * Skv * Dv, Dv, dp, Skv);
        softmax_backward_rows(dp, p, S, Skv, alpha);
        if (dq) sgemm(who.c_str(), false, true, S, D, Skv, dp, Skv, pk + b * D * Skv, Skv, dq + b * S * D, D);
        if (dk) sgemm(who.c_str(), true, false, D, Skv, S, pq + b * S * D, D, dp, Skv, dk + b * D * Skv, Skv);
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
