// MatMul, Gemm, com.microsoft FusedMatMul and ai.onyx FusedMatMulBias on cuBLASLt, for float,
// float16, bfloat16 (fp32 accumulation) and double. Semantics, opset ranges and messages mirror
// kernels/cpu/matmul.cpp.
//
// onyx tensors are row-major and cuBLAS is column-major: a row-major Y[M, N] is a column-major
// Y^T[N, M], so every product is computed as Y^T = op(B)^T op(A)^T, i.e. cuBLAS's "A" is our B
// and its "B" is our A, with m = N, n = M. A row bias over Y's columns is then a bias over the
// rows of cuBLAS's D, which is what CUBLASLT_EPILOGUE_BIAS broadcasts.
//
// Per shape, the heuristic's choice (algorithm and workspace size) is cached in the kernel
// (mutex-guarded), so steady-state runs make no heuristic query. The descriptors themselves are
// re-initialised on the stack for each call (cublasLt*Init on the semi-opaque structs: no
// allocation, microseconds): the bias pointer lives in the operation descriptor, so a shared
// one could not serve concurrent runs.
#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/cuda/matmul_launch.h"
#include "kernels/matmul_shape.h"

namespace onyx::cuda {
namespace {

using mm::Act;
using mm::DType;

/// Workspace a product may use: 32 MiB, what NVIDIA recommends for cuBLASLt on Hopper.
constexpr size_t kMaxWorkspace = size_t(32) << 20;

DType mm_dtype(DataType dt) {
  switch (dt) {
    case DataType::Float: return DType::F32;
    case DataType::Float16: return DType::F16;
    case DataType::BFloat16: return DType::BF16;
    case DataType::Double: return DType::F64;
    default: ONYX_THROW("[cuda] matmul has no {} kernel", dtype_name(dt));
  }
}

cudaDataType_t lt_type(DataType dt) {
  switch (dt) {
    case DataType::Float: return CUDA_R_32F;
    case DataType::Float16: return CUDA_R_16F;
    case DataType::BFloat16: return CUDA_R_16BF;
    default: return CUDA_R_64F;
  }
}

/// One cuBLASLt call (or a strided batch of them) in onyx's row-major terms:
/// Y[M, N] = alpha * op(A)[M, K] x op(B)[K, N] + beta * C, where C has Y's layout (C is Y itself
/// unless Gemm passes a full [M, N] C). ta/tb: the operand is stored with its last two dims
/// swapped. Strides are in elements between the matrices of a batch (0: one matrix for all).
struct LtProblem {
  DataType dt = DataType::Float;
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_y = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // Byte alignments of the pointers the calls will see (cuBLASLt's heuristic assumes 256).
  unsigned align_a = 256, align_b = 256, align_c = 256, align_y = 256, align_bias = 256;

  std::vector<int64_t> key() const {
    return {static_cast<int64_t>(dt), M, N, K, ta, tb, batch, stride_a, stride_b, stride_y,
            static_cast<int64_t>(epilogue), align_a, align_b, align_c, align_y, align_bias};
  }
};

/// The descriptors of one call, initialised in place (see the file comment).
struct LtDescs {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, c, d;  // cuBLAS's A (our B), B (our A), C, D

  LtDescs(const LtProblem& p, const void* bias) {
    const bool dbl = p.dt == DataType::Double;
    const cublasComputeType_t compute = dbl ? CUBLAS_COMPUTE_64F
                                        : p.dt == DataType::Float && tf32_enabled()
                                            ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    ONYX_CUBLAS_CHECK(cublasLtMatmulDescInit(&op, compute, dbl ? CUDA_R_64F : CUDA_R_32F));
    const int32_t op_a = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_op(CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
    set_op(CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      const uint32_t epi = p.epilogue;
      set_op(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
      set_op(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      if (p.batch > 1) {
        const int64_t none = 0;  // one bias for every matrix of the batch
        set_op(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &none, sizeof(none));
      }
    }
    const cudaDataType_t t = lt_type(p.dt);
    // Column-major views of the row-major buffers: a row-major [r, c] is a column-major [c, r].
    init_layout(&a, t, p.tb ? p.K : p.N, p.tb ? p.N : p.K, p.stride_b, p.batch);
    init_layout(&b, t, p.ta ? p.M : p.K, p.ta ? p.K : p.M, p.stride_a, p.batch);
    init_layout(&c, t, p.N, p.M, p.stride_y, p.batch);
    init_layout(&d, t, p.N, p.M, p.stride_y, p.batch);
  }

 private:
  void set_op(cublasLtMatmulDescAttributes_t attr, const void* v, size_t n) {
    ONYX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(&op, attr, v, n));
  }
  static void init_layout(cublasLtMatrixLayoutOpaque_t* l, cudaDataType_t t, int64_t rows,
                          int64_t cols, int64_t stride, int64_t batch) {
    ONYX_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, t, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), rows));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      ONYX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &count, sizeof(count)));
      ONYX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }
};

/// The heuristic's answer for one problem. `fused` is false when cuBLASLt had no algorithm
/// with the requested epilogue: `algo` then runs the plain product and the caller applies the
/// epilogue itself.
struct LtPlan {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool fused = true;
};

/// Per-kernel cache of heuristic results, keyed by LtProblem::key(); a problem cuBLASLt has no
/// algorithm for is remembered as nullopt, so it is not asked again either.
class LtPlanCache {
 public:
  std::optional<LtPlan> get(cublasLtHandle_t h, const LtProblem& p, const void* bias) const {
    const std::vector<int64_t> key = p.key();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
    }
    std::optional<LtPlan> plan = query(h, p, bias);
    if (!plan && p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      LtProblem plain = p;
      plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      plan = query(h, plain, nullptr);
      if (plan) plan->fused = false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    return plans_.emplace(key, plan).first->second;
  }

 private:
  static std::optional<LtPlan> query(cublasLtHandle_t h, const LtProblem& p, const void* bias) {
    LtDescs d(p, bias);
    cublasLtMatmulPreferenceOpaque_t pref;
    ONYX_CUBLAS_CHECK(cublasLtMatmulPreferenceInit(&pref));
    const uint64_t ws = kMaxWorkspace;
    ONYX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    // cuBLAS's A is our B and its B our A.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_y}};
    for (const auto& [attr, v] : aligns)
      ONYX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(&pref, attr, &v, sizeof(v)));
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(h, &d.op, &d.a, &d.b, &d.c, &d.d, &pref, 1,
                                                       &result, &count);
    if (rc == CUBLAS_STATUS_NOT_SUPPORTED || (rc == CUBLAS_STATUS_SUCCESS && count == 0))
      return std::nullopt;
    check_cublas(rc, "cublasLtMatmulAlgoGetHeuristic");
    if (result.state != CUBLAS_STATUS_SUCCESS) return std::nullopt;
    LtPlan plan;
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    return plan;
  }

  mutable std::mutex mu_;
  mutable std::map<std::vector<int64_t>, std::optional<LtPlan>> plans_;
};

/// Element offsets of A, B and Y for one call of a product split into several calls.
struct CallOffsets {
  int64_t a = 0, b = 0, y = 0;
};

/// Runs `p` once per entry of `calls` (its alignments filled in here from the pointers):
/// Y = alpha * A x B + beta * C (C = Y when `c` is null). Returns whether cuBLASLt ran the
/// requested epilogue (see LtPlan::fused). A strided batch cuBLASLt has no algorithm for (a
/// broadcast operand's stride 0, say) runs as one call per matrix.
bool run_lt(KernelContext& ctx, const LtPlanCache& cache, LtProblem p,
            std::vector<CallOffsets> calls, const void* A, const void* B, const void* c, void* Y,
            const void* bias, double alpha, double beta) {
  const size_t es = dtype_size(p.dt);
  auto at = [es](const void* base, int64_t off) {
    return static_cast<const char*>(base) + static_cast<size_t>(off) * es;
  };
  auto align = [&] {
    p.align_a = p.align_b = p.align_y = 256;
    for (const CallOffsets& o : calls) {
      p.align_a = std::min(p.align_a, pointer_alignment(at(A, o.a)));
      p.align_b = std::min(p.align_b, pointer_alignment(at(B, o.b)));
      p.align_y = std::min(p.align_y, pointer_alignment(at(Y, o.y)));
    }
    p.align_c = c ? pointer_alignment(c) : p.align_y;
    p.align_bias = bias ? pointer_alignment(bias) : 256;
  };
  align();
  CublasLtLease handle;
  std::optional<LtPlan> plan = cache.get(handle.get(), p, bias);
  if (!plan && p.batch > 1) {
    std::vector<CallOffsets> each;
    each.reserve(calls.size() * static_cast<size_t>(p.batch));
    for (const CallOffsets& o : calls)
      for (int64_t i = 0; i < p.batch; ++i)
        each.push_back({o.a + i * p.stride_a, o.b + i * p.stride_b, o.y + i * p.stride_y});
    calls = std::move(each);
    p.batch = 1;
    p.stride_a = p.stride_b = p.stride_y = 0;
    align();
    plan = cache.get(handle.get(), p, bias);
  }
  ONYX_CHECK(plan.has_value(),
             "[{}] cuBLASLt has no algorithm for a {} product [{}, {}] x [{}, {}] (transA {}, "
             "transB {})",
             ctx.label(), dtype_name(p.dt), p.M, p.K, p.K, p.N, p.ta, p.tb);
  LtProblem run = p;
  if (!plan->fused) run.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  LtDescs d(run, bias);
  Tensor ws = workspace(ctx, plan->workspace);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const bool dbl = p.dt == DataType::Double;
  const void* alpha_p = dbl ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = dbl ? static_cast<const void*>(&beta) : &beta_f;
  cudaStream_t s = stream_of(ctx);
  for (const CallOffsets& o : calls) {
    void* y = const_cast<char*>(at(Y, o.y));
    ONYX_CUBLAS_CHECK(cublasLtMatmul(handle.get(), &d.op, alpha_p, at(B, o.b), &d.a, at(A, o.a),
                                     &d.b, beta_p, c ? c : y, &d.c, y, &d.d, &plan->algo,
                                     ws.raw(), plan->workspace, s));
  }
  return plan->fused;
}

void check_int32(const std::string& who, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d > INT32_MAX)
      throw NotImplemented(fmt::format(
          "[{}] a matrix dimension or batch of {} exceeds cuBLASLt's 32-bit limit", who, d));
}

/// How a broadcast batched MatMul maps onto cuBLASLt: `p` (M, N, K, ta, tb, batch and strides)
/// and the offsets of the calls that together cover the batch. A weight shared by every batch
/// with A stored plainly folds the batch into M (one [batch*M, K] x [K, N] product). Otherwise
/// the innermost batch dims whose offsets are linear in every operand (stride 0 for a broadcast
/// one) form one strided batch, and the remaining outer dims are a loop of calls.
void plan_batches(const std::string& who, const MatMulShape& s, bool ta, bool tb, LtProblem& p,
                  std::vector<CallOffsets>& calls) {
  p.M = s.M, p.N = s.N, p.K = s.K, p.ta = ta, p.tb = tb;
  const int64_t nb = shape_numel(s.batch);
  const bool b_shared = shape_numel(s.b_batch) == 1, a_full = s.a_batch == s.batch;
  if (nb == 1 || (b_shared && a_full && !ta && nb * s.M <= INT32_MAX)) {
    p.M = nb * s.M;
    calls.push_back({});
    check_int32(who, {p.M, p.N, p.K});
    return;
  }
  // Per batch dim of size > 1: its size and the element strides of A, B and Y along it.
  struct Dim {
    int64_t n, a, b, y;
  };
  std::vector<Dim> dims;
  const int64_t r = static_cast<int64_t>(s.batch.size());
  int64_t sa = s.M * s.K, sb = s.K * s.N, sy = s.M * s.N;
  for (int64_t d = r - 1; d >= 0; --d) {
    if (s.batch[d] > 1)
      dims.push_back({s.batch[d], s.a_batch[d] == 1 ? 0 : sa, s.b_batch[d] == 1 ? 0 : sb, sy});
    sa *= s.a_batch[d];
    sb *= s.b_batch[d];
    sy *= s.batch[d];
  }
  // dims[0] is the innermost. Merge outward while each operand stays linear.
  size_t inner = 1;
  int64_t count = dims[0].n;
  while (inner < dims.size()) {
    const Dim &in = dims[inner - 1], &out = dims[inner];
    if (out.a != in.a * in.n || out.b != in.b * in.n || out.y != in.y * in.n) break;
    count *= out.n;
    ++inner;
  }
  p.batch = count;
  p.stride_a = dims[0].a;
  p.stride_b = dims[0].b;
  p.stride_y = dims[0].y;
  check_int32(who, {p.M, p.N, p.K, p.batch});
  // The outer dims, innermost first: enumerate their index space.
  std::vector<Dim> outer(dims.begin() + static_cast<std::ptrdiff_t>(inner), dims.end());
  int64_t n_calls = 1;
  for (const Dim& d : outer) n_calls *= d.n;
  calls.reserve(static_cast<size_t>(n_calls));
  for (int64_t i = 0; i < n_calls; ++i) {
    CallOffsets o;
    int64_t rest = i;
    for (const Dim& d : outer) {
      const int64_t k = rest % d.n;
      rest /= d.n;
      o.a += k * d.a;
      o.b += k * d.b;
      o.y += k * d.y;
    }
    calls.push_back(o);
  }
}

Act mm_act(MatMulActivation a) {
  switch (a) {
    case MatMulActivation::Relu: return Act::Relu;
    case MatMulActivation::Gelu: return Act::Gelu;
    case MatMulActivation::GeluTanh: return Act::GeluTanh;
    case MatMulActivation::None: break;
  }
  return Act::None;
}

/// The cuBLASLt epilogue for a FusedMatMulBias activation. cuBLASLt's GELU is the tanh
/// approximation, so erf GELU runs as BIAS followed by our own kernel.
cublasLtEpilogue_t bias_epilogue(Act act) {
  switch (act) {
    case Act::Relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Act::GeluTanh: return CUBLASLT_EPILOGUE_GELU_BIAS;
    default: return CUBLASLT_EPILOGUE_BIAS;
  }
}

/// MatMul, com.microsoft FusedMatMul = alpha * op(A) x op(B) (op swaps the last two dims;
/// transBatchA/B are refused, as on the CPU), and ai.onyx FusedMatMulBias(A, B, bias) =
/// act(A x op(B) + bias) with B 2-D and bias [N] or [1, .., N].
class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelInfo& info) : attrs_(info), act_(mm_act(attrs_.act)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.required_input(0);
    const Tensor& B = ctx.required_input(1);
    bool ta = false, tb = false;
    const MatMulShape s = matmul_run_shape(ctx, attrs_, ta, tb);
    const Tensor* bias = attrs_.bias ? &ctx.required_input(2) : nullptr;
    Tensor& Y = ctx.allocate_output(0, A.dtype(), s.out);
    if (Y.numel() == 0) return;
    const DType dt = mm_dtype(A.dtype());
    cudaStream_t stream = stream_of(ctx);
    const int64_t rows = Y.numel() / s.N;
    if (s.K == 0) {  // an empty sum: zeros, then the bias and activation
      ONYX_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), stream));
      if (bias) {
        mm::launch_bias_act(Y.raw(), bias->raw(), rows, s.N, act_, dt, stream);
        ONYX_CUDA_CHECK(cudaGetLastError());
      }
      return;
    }
    LtProblem p;
    p.dt = A.dtype();
    std::vector<CallOffsets> calls;
    plan_batches(ctx.label(), s, ta, tb, p, calls);
    // The bias epilogue needs one shared B (FusedMatMulBias's B is 2-D) and cuBLASLt's float
    // types; double adds the bias with our kernel.
    const bool want_epilogue = bias && dt != DType::F64;
    if (want_epilogue) p.epilogue = bias_epilogue(act_);
    const bool fused = run_lt(ctx, cache_, p, calls, A.raw(), B.raw(), nullptr, Y.raw(),
                              want_epilogue ? bias->raw() : nullptr, attrs_.alpha, 0.0);
    if (bias && (!want_epilogue || !fused)) {
      mm::launch_bias_act(Y.raw(), bias->raw(), rows, s.N, act_, dt, stream);
      ONYX_CUDA_CHECK(cudaGetLastError());
    } else if (bias && act_ == Act::Gelu) {  // BIAS ran in cuBLASLt; erf GELU is ours
      mm::launch_bias_act(Y.raw(), nullptr, rows, s.N, act_, dt, stream);
      ONYX_CUDA_CHECK(cudaGetLastError());
    }
  }

 private:
  MatMulAttrs attrs_;
  Act act_;  // attrs_.act for the launchers
  LtPlanCache cache_;
};

/// Y = alpha * A' * B' + beta * C with C broadcast to [M, N]. A full [M, N] C is cuBLASLt's C;
/// a row C with beta 1 is its bias epilogue; any other C is broadcast into Y first, which the
/// product then accumulates into (beta * Y, in place).
class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 1.0f)),
        beta_(info.node.attr_float("beta", 1.0f)),
        trans_a_(info.node.attr_int("transA", 0) != 0),
        trans_b_(info.node.attr_int("transB", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.required_input(0);
    const Tensor& B = ctx.required_input(1);
    const Tensor* C = ctx.input(2);
    DataType dt = A.dtype();
    const auto [M, N, K, cm, cn] = gemm_shape(ctx, trans_a_, trans_b_);
    const bool use_c = C && beta_ != 0.0f;
    Tensor& Y = ctx.allocate_output(0, dt, {M, N});
    if (Y.numel() == 0) return;
    const DType mdt = mm_dtype(dt);
    cudaStream_t stream = stream_of(ctx);
    if (K == 0) {  // alpha * (empty sum) + beta * C
      if (use_c)
        mm::launch_broadcast_c(Y.raw(), C->raw(), M, N, cm, cn, beta_, mdt, stream);
      else
        ONYX_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), stream));
      ONYX_CUDA_CHECK(cudaGetLastError());
      return;
    }
    LtProblem p;
    p.dt = dt;
    p.M = M, p.N = N, p.K = K, p.ta = trans_a_, p.tb = trans_b_;
    check_int32(ctx.label(), {M, N, K});
    const std::vector<CallOffsets> one{{}};
    if (!use_c) {
      run_lt(ctx, cache_, p, one, A.raw(), B.raw(), nullptr, Y.raw(), nullptr, alpha_, 0.0);
      return;
    }
    if (cm == M && cn == N) {
      run_lt(ctx, cache_, p, one, A.raw(), B.raw(), C->raw(), Y.raw(), nullptr, alpha_, beta_);
      return;
    }
    if (cm == 1 && cn == N && beta_ == 1.0f && mdt != DType::F64) {
      p.epilogue = CUBLASLT_EPILOGUE_BIAS;
      if (run_lt(ctx, cache_, p, one, A.raw(), B.raw(), nullptr, Y.raw(), C->raw(), alpha_, 0.0))
        return;
      // No algorithm with the epilogue: the product just ran plainly; add C afterwards.
      mm::launch_bias_act(Y.raw(), C->raw(), M, N, Act::None, mdt, stream);
      ONYX_CUDA_CHECK(cudaGetLastError());
      return;
    }
    mm::launch_broadcast_c(Y.raw(), C->raw(), M, N, cm, cn, 1.0, mdt, stream);
    ONYX_CUDA_CHECK(cudaGetLastError());
    run_lt(ctx, cache_, p, one, A.raw(), B.raw(), nullptr, Y.raw(), nullptr, alpha_, beta_);
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_;
  LtPlanCache cache_;
};

}  // namespace

void register_matmul_kernels(KernelRegistry& r) {
  const std::vector<DataType> types{DataType::Float, DataType::Float16, DataType::BFloat16,
                                    DataType::Double};
  r.add({.op_type = "MatMul",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "FusedMatMul",
         .domain = "com.microsoft",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "FusedMatMulBias",
         .domain = "ai.onyx",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "Gemm",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = make_factory<GemmKernel>()});
}

}  // namespace onyx::cuda
