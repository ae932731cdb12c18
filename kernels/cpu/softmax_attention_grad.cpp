// ai.onyx SoftmaxAttentionGrad: the backward of O = Softmax(alpha-scaled Q Kt [+ mask]) V for
// one (batch, head) matrix at a time, whose [Sq, Skv] intermediates stay in the core's cache.
// Training differentiates an attention spelling as one unit (autodiff/attention_spelling.cpp),
// writing about a dozen plain nodes, each a pass over a [B, H, Sq, Skv] tensor through memory;
// the optimizer's fuse_softmax_attention_grad (inference/fusions_attention_grad.cpp) swaps them
// for this kernel.
//
//   inputs:  dO [..., Sq, Dv], P [..., Sq, Skv] (the probabilities), V [..., Skv, Dv],
//            Q [..., Sq, D] (for dKt), Kt [..., D, Skv] (for dQ), alpha (one element; 1 when
//            omitted), cond (bool, broadcasting to P's shape; optional: the backward of a
//            Where that filled masked scores, Hugging Face's GPT-2)
//   outputs: dQ, dKt, dV (each optional)
//   attributes: dO_perm (dO is Transpose(input 0, dO_perm)), dQ_perm, dKt_perm, dV_perm (each
//     output is Transpose(gradient, perm)): the Transposes around it that the optimizer folded
//     (a head split's gradient), read and written in place by strided matrices;
//     keep_where_true (1 by default): with cond, dX is kept where cond is true and zero where it
//     is false, or the other way round when 0
//   dV = P^T dO;  dP = dO V^T;  dX = (dP - rowsum(dP * P)) * P * alpha [zeroed by cond];
//   dQ = dX Kt^T;  dKt = Q^T dX
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// One batch's matrix: element (i, j) at p[i * ld + j], or at p[j * ld + i] when `t`.
struct Mat {
  const float* p;
  int64_t ld;
  bool t;
};

/// C[M, N] = A[M, K] B[K, N] over matrices of any orientation (a transposed C as C^T = B^T A^T).
void gemm(const char* who, const Mat& C, const Mat& A, const Mat& B, int64_t M, int64_t N, int64_t K) {
  float* c = const_cast<float*>(C.p);  // C views an output or the scratch
  if (!C.t)
    sgemm(who, A.t, B.t, M, N, K, A.p, A.ld, B.p, B.ld, 0.f, c, C.ld);
  else
    sgemm(who, !B.t, !A.t, N, M, K, B.p, B.ld, A.p, A.ld, 0.f, c, C.ld);
}

/// Where a logical [batch..., rows, cols] tensor's elements are in a permuted stored one: the
/// element stride of each logical axis.
struct Layout {
  std::vector<int64_t> stride;

  /// The layout of `logical` stored contiguously as Transpose(logical, perm) (an output), or,
  /// with `input`, of logical = Transpose(stored, perm) with `stored` its stored shape.
  static Layout of(const Shape& stored, const std::vector<int64_t>& perm, bool input) {
    const auto r = static_cast<int64_t>(stored.size());
    std::vector<int64_t> st(r);
    for (int64_t i = r - 1, acc = 1; i >= 0; acc *= stored[i], --i) st[i] = acc;
    Layout l{std::vector<int64_t>(r)};
    for (int64_t i = 0; i < r; ++i) {
      if (input)
        l.stride[i] = st[perm[i]];
      else
        l.stride[perm[i]] = st[i];
    }
    return l;
  }
  /// Matrix b of the batch dims `batch`.
  Mat at(const float* base, int64_t b, const Shape& batch) const {
    const auto r = static_cast<int64_t>(stride.size());
    int64_t off = 0;
    for (int64_t i = r - 3; i >= 0; --i) {
      off += b % batch[i] * stride[i];
      b /= batch[i];
    }
    if (stride[r - 1] == 1) return {base + off, stride[r - 2], false};
    return {base + off, stride[r - 1], true};
  }
};

/// Stored shape of Transpose(logical, perm).
Shape permuted(const Shape& logical, const std::vector<int64_t>& perm) {
  Shape s(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) s[j] = logical[perm[j]];
  return s;
}

/// Asks for the cache lines of p[0, n) into L2: the next head's operands, which the forward
/// wrote long before, while this head computes (sgemm's packing would meet them cold).
void prefetch_l2(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(p + i, 0, 2);
}

/// t's element strides for the axes of [batch..., rows, cols], t's dims right-aligned to them
/// (numpy's broadcasting): 0 where t's dim is 1 or absent, so that it repeats.
std::vector<int64_t> broadcast_strides(const Tensor& t, int64_t rank) {
  std::vector<int64_t> stride(rank, 0);
  for (int64_t i = t.rank() - 1, acc = 1; i >= 0; acc *= t.dim(i), --i)
    stride[rank - t.rank() + i] = t.dim(i) == 1 ? 0 : acc;
  return stride;
}

/// Where each matrix of `t` starts, for every index of `batch` (t's leading dims broadcast to it:
/// a dim of 1, or one t lacks, repeats its matrix).
template <typename T>
std::vector<const T*> batch_starts(const Shape& batch, const Tensor& t) {
  const auto nd = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> stride = broadcast_strides(t, nd + 2);
  std::vector<const T*> out(shape_numel(batch));
  for (int64_t b = 0; b < static_cast<int64_t>(out.size()); ++b) {
    int64_t rem = b, off = 0;
    for (int64_t i = nd - 1; i >= 0; --i) {
      off += rem % batch[i] * stride[i];
      rem /= batch[i];
    }
    out[b] = t.data<T>() + off;
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

/// A boolean tensor broadcast to [batch..., rows, cols]: each batch's matrix and the strides
/// of its rows and columns (0 where it repeats).
struct BroadcastMask {
  std::vector<const bool*> at;
  int64_t row_stride = 0, col_stride = 0;

  static BroadcastMask of(const Tensor& m, const Shape& batch) {
    const auto r = static_cast<int64_t>(batch.size()) + 2;
    const std::vector<int64_t> stride = broadcast_strides(m, r);
    return {batch_starts<bool>(batch, m), stride[r - 2], stride[r - 1]};
  }
};

/// Zeroes dX [rows, cols] where the mask (from `m`) differs from `keep`.
void apply_mask(float* dx, int64_t rows, int64_t cols, const bool* m, int64_t rs, int64_t cs, bool keep) {
  for (int64_t i = 0; i < rows; ++i) {
    const bool* mr = m + i * rs;
    float* d = dx + i * cols;
    if (cs == 0) {
      if (mr[0] != keep) std::fill_n(d, cols, 0.f);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j)
      if (mr[j * cs] != keep) d[j] = 0.f;
  }
}

/// The attribute `name`: a permutation of `rank` axes keeping a matrix axis last in memory, or
/// empty (no Transpose folded).
std::vector<int64_t> perm_attr(const KernelInfo& info, const char* name) {
  std::vector<int64_t> p = info.node.attr_ints(name);
  if (p.empty()) return p;
  const auto r = static_cast<int64_t>(p.size());
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  bool ok = r >= 2;
  for (int64_t i = 0; ok && i < r; ++i) ok = sorted[i] == i;
  ONYX_CHECK(ok, "[{}] attribute {} should be a permutation of 0..{} but is [{}]", info.node.label(),
             name, r - 1, fmt::join(p, ", "));
  return p;
}

class SoftmaxAttentionGradKernel final : public Kernel {
 public:
  explicit SoftmaxAttentionGradKernel(const KernelInfo& info)
      : perms_{perm_attr(info, "dO_perm"), perm_attr(info, "dQ_perm"), perm_attr(info, "dKt_perm"),
               perm_attr(info, "dV_perm")},
        keep_where_true_(info.node.attr_int("keep_where_true", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& dO = ctx.required_input(0);
    const Tensor& P = ctx.required_input(1);
    const Tensor& V = ctx.required_input(2);
    const Tensor* Q = opt_input(ctx, 3);
    const Tensor* Kt = opt_input(ctx, 4);
    const Tensor* alpha_t = opt_input(ctx, 5);
    const Tensor* cond = opt_input(ctx, 6);
    auto wanted = [&](int i) { return i < ctx.num_outputs() && ctx.output_wanted(i); };
    const bool want_dq = wanted(0), want_dk = wanted(1), want_dv = wanted(2);

    // Everything is checked before an output is allocated. The batch is dO's: every operand's
    // batch dims equal its dims or are 1 (MatMul's broadcasting, with one rank).
    const int64_t r = dO.rank();
    ONYX_CHECK(r >= 2, "[{}] dO should have rank >= 2 but is {}", who, shape_str(dO.shape()));
    for (const auto& p : perms_)
      ONYX_CHECK(p.empty() || static_cast<int64_t>(p.size()) == r,
                 "[{}] a perm attribute has {} axes but dO has rank {}", who, p.size(), r);
    const Shape o_shape = perms_[0].empty() ? dO.shape() : permuted(dO.shape(), perms_[0]);
    const Shape batch(o_shape.begin(), o_shape.end() - 2);
    const int64_t S = o_shape[r - 2], Dv = o_shape[r - 1];
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
    if (cond) {
      Shape full = batch;  // P's shape as the products see it
      full.push_back(S);
      full.push_back(Skv);
      bool ok = cond->dtype() == DataType::Bool && cond->rank() <= r;
      for (int64_t i = 0, lead = r - cond->rank(); ok && i < cond->rank(); ++i)
        ok = cond->dim(i) == 1 || cond->dim(i) == full[lead + i];
      ONYX_CHECK(ok, "[{}] cond should be bool broadcasting to {} but is {} {}", who,
                 shape_str(full), dtype_name(cond->dtype()), shape_str(cond->shape()));
    }

    // Each output in its stored (permuted) shape, with the layout its matrices are written in.
    std::vector<Layout> layouts(3);
    auto output = [&](int i, int64_t rows, int64_t cols) {
      Shape s = batch;
      s.push_back(rows);
      s.push_back(cols);
      std::vector<int64_t> perm = perms_[i + 1];
      if (perm.empty())
        for (int64_t a = 0; a < r; ++a) perm.push_back(a);
      layouts[i] = Layout::of(permuted(s, perm), perm, false);
      return ctx.allocate_output(i, DataType::Float, permuted(s, perm)).data<float>();
    };
    float* dq = want_dq ? output(0, S, D) : nullptr;
    float* dk = want_dk ? output(1, D, Skv) : nullptr;
    float* dv = want_dv ? output(2, Skv, Dv) : nullptr;
    std::vector<int64_t> o_perm = perms_[0];
    if (o_perm.empty())
      for (int64_t a = 0; a < r; ++a) o_perm.push_back(a);
    const Layout o_layout = Layout::of(dO.shape(), o_perm, true);
    const int64_t nb = shape_numel(batch);
    const bool want_dx = want_dq || want_dk;
    const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), nb)));
    Tensor scratch = want_dx ? ctx.scratch(DataType::Float, {threads, S * Skv}) : Tensor();
    const float* po = dO.data<float>();
    using Starts = std::vector<const float*>;
    const Starts p_at = batch_starts<float>(batch, P), v_at = batch_starts<float>(batch, V);
    const Starts q_at = Q ? batch_starts<float>(batch, *Q) : Starts();
    const Starts k_at = Kt ? batch_starts<float>(batch, *Kt) : Starts();
    const BroadcastMask mask = cond && want_dx ? BroadcastMask::of(*cond, batch) : BroadcastMask();
    // One batch-head per task; oneDNN's sgemm runs on the task's thread.
    dnnl_util::ThreadScope one(1);
    parallel_for(nb, threads, 1, [&](int64_t b0, int64_t b1) {
      // parallel_for's chunks are contiguous, at most ceil(nb / threads) long: one slot each.
      const int64_t slot = b0 / ((nb + threads - 1) / threads);
      float* dp = want_dx ? scratch.data<float>() + slot * S * Skv : nullptr;
      for (int64_t b = b0; b < b1; ++b) {
        const Mat o = o_layout.at(po, b, batch);
        const float* p = p_at[b];
        if (b + 1 < b1) {
          prefetch_l2(p_at[b + 1], S * Skv);
          const Mat next = o_layout.at(po, b + 1, batch);
          for (int64_t i = 0; i < S; ++i) prefetch_l2(next.p + i * next.ld, Dv);
          prefetch_l2(v_at[b + 1], Skv * Dv);
          if (dq) prefetch_l2(k_at[b + 1], D * Skv);
          if (dk) prefetch_l2(q_at[b + 1], S * D);
        }
        if (dv) gemm(who.c_str(), layouts[2].at(dv, b, batch), {p, Skv, true}, o, Skv, Dv, S);
        if (!want_dx) continue;
        gemm(who.c_str(), {dp, Skv, false}, o, {v_at[b], Dv, true}, S, Skv, Dv);
        softmax_backward_rows(dp, p, S, Skv, alpha);
        if (!mask.at.empty())
          apply_mask(dp, S, Skv, mask.at[b], mask.row_stride, mask.col_stride, keep_where_true_);
        if (dq)
          gemm(who.c_str(), layouts[0].at(dq, b, batch), {dp, Skv, false},
               {k_at[b], Skv, true}, S, D, Skv);
        if (dk)
          gemm(who.c_str(), layouts[1].at(dk, b, batch), {q_at[b], D, true},
               {dp, Skv, false}, D, Skv, S);
      }
    });
  }

 private:
  std::vector<std::vector<int64_t>> perms_;  // dO, dQ, dKt, dV
  bool keep_where_true_;
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
