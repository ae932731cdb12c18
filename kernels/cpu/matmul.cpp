// MatMul, com.microsoft FusedMatMul, ai.onyx FusedMatMulBias and Gemm (the integer forms are in quantize.cpp). float32 and the 16-bit floats run on oneDNN's
// matmul primitive (cached per shape); double and integer types on our own blocked gemm.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cpu/blocked_sgemm.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/panel_gemm.h"
#include "kernels/cpu/ref_gemm.h"
#include "kernels/matmul_shape.h"
#include "kernels/cpu/simd/simd.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

using MatMulTypes =
    TypeList<float, double, float16, bfloat16, int32_t, int64_t, uint32_t, uint64_t>;

bool dnnl_float(DataType dt) {
  return dt == DataType::Float || dt == DataType::Float16 || dt == DataType::BFloat16;
}

/// Offset (in matrices) of batch `idx` of an operand with dims `dims` broadcast to `batch`.
int64_t batch_offset(int64_t idx, const Shape& batch, const Shape& dims) {
  int64_t off = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    int64_t i = idx % batch[d];
    idx /= batch[d];
    if (dims[d] != 1) off += i * stride;
    stride *= dims[d];
  }
  return off;
}

/// Batched broadcasting matmul on our own gemm; parallel over batches when there are many.
/// `ta`/`tb`: the operand is stored transposed (its last two dims swapped).
template <typename T>
void ref_matmul(const MatMulShape& s, const T* A, const T* B, T* C, int threads, bool ta = false,
                bool tb = false) {
  int64_t batches = shape_numel(s.batch);
  // One weight for every batch (x [B, S, K] times W [K, N]) with A stored plainly and not
  // broadcast: the batches are rows of one [B*S, K] operand, and B is packed once instead of
  // B times (BERT's float64 feed-forward layers, 15 % faster).
  const bool shared_b = std::all_of(s.b_batch.begin(), s.b_batch.end(), [](int64_t d) { return d == 1; });
  if (batches > 1 && shared_b && !ta && s.a_batch == s.batch) {
    ref_gemm<T>(batches * s.M, s.N, s.K, A, s.K, 1, B, tb ? 1 : s.N, tb ? s.K : 1, C, threads);
    return;
  }
  auto one = [&](int64_t i, int th) {
    const T* a = A + batch_offset(i, s.batch, s.a_batch) * s.M * s.K;
    const T* b = B + batch_offset(i, s.batch, s.b_batch) * s.K * s.N;
    ref_gemm<T>(s.M, s.N, s.K, a, ta ? 1 : s.K, ta ? s.M : 1, b, tb ? 1 : s.N, tb ? s.K : 1,
                C + i * s.M * s.N, th);
  };
  if (batches >= threads) {
    parallel_for(batches, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) one(i, 1);
    });
  } else {
    for (int64_t i = 0; i < batches; ++i) one(i, threads);
  }
}

/// y[N] = x[K] * B for one float32 row: B is [K, N] (row stride N) or, when `trans_b`, stored
/// as [N, K]. A one-row product only streams B, and oneDNN's gemm reads it at about half the
/// memory bandwidth (a batch-1 MLP ran at 1.85x ONNX Runtime's time), so each thread streams
/// one contiguous block of B: with `trans_b` a range of B's rows (columns of y); without it a
/// range of B's rows too, i.e. of k, each thread summing into its own partial y that are added
/// up after. Splitting a plain B by columns instead gave each thread strided half-rows, and
/// two threads read 90-95 GB/s where whole blocks read 135-141 (3 x 4 MB layers, 2 cores,
/// medians; bench/README.md).
void gemv_f32(int64_t K, int64_t N, const float* x, const float* B, bool trans_b, float* y,
              int threads) {
  const auto gemv_cols = simd().gemv_cols;  // the active ISA's loops (simd/simd_body.inc)
  const int64_t split = trans_b ? N : K;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, split / 64));
  if (trans_b || parts == 1) {
    parallel_for(parts, threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part)
        gemv_cols(K, N, x, B, trans_b, y, N * part / parts, N * (part + 1) / parts);
    });
    return;
  }
  // Part 0 writes y itself; the others their own rows of `partial`, kept by the calling thread
  // across calls (grown once; no allocation per run).
  thread_local std::vector<float> partial;
  if (partial.size() < static_cast<size_t>((parts - 1) * N)) partial.resize((parts - 1) * N);
  float* rest = partial.data();
  parallel_for(parts, threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t part = b; part < e; ++part) {
      const int64_t k0 = K * part / parts, k1 = K * (part + 1) / parts;
      float* out = part == 0 ? y : rest + (part - 1) * N;
      gemv_cols(k1 - k0, N, x + k0, B + k0 * N, false, out, 0, N);
    }
  });
  for (int64_t part = 1; part < parts; ++part) {
    const float* p = rest + (part - 1) * N;
    for (int64_t j = 0; j < N; ++j) y[j] += p[j];
  }
}

/// A oneDNN matmul and the dtype it runs in (float32 when the 16-bit one has no fast path).
struct MatMulEntry {
  du::Prim prim;
  dnnl::memory::desc a, b, c;
  dnnl::memory::desc bias;  // zero when the primitive adds no bias
  DataType run_dt = DataType::Float;
  bool ok = false;  // false: oneDNN has no implementation; use our own loops
  std::string why;  // why a 16-bit dt runs in float32 (empty when it runs natively)
  /// Constant weights: the primitive's own layout (b_p) and the reorder into it from ours
  /// (PackedWeights does it once); without it oneDNN re-packs a plain B on every call
  /// (BERT-base's 85 M weights, 340 MB read and written per inference).
  dnnl::memory::desc b_p;
  std::optional<du::Prim> b_r;
};

/// Creates a matmul for (a, b, c) descriptors built by `descs(dt)`, trying `dt` first. With
/// `pack_b` the primitive picks B's layout (the weights are constant and reordered once). A
/// non-empty `bias_dims` adds a bias of those dims (in the run dtype) to the product. Without
/// `primitive` the entry has B's layout and reorder but no matmul (packing ahead of the runs
/// needs no product, and compiling one costs the JIT's time).
template <typename Descs>
MatMulEntry make_matmul(DataType dt, const dnnl::primitive_attr& attr, Descs&& descs,
                        bool pack_b = false, const Shape& bias_dims = {}, bool primitive = true) {
  MatMulEntry e;
  for (DataType run : {dt, DataType::Float}) {
    if (const auto gap = du::low_precision_gap(run); gap != du::LowPrecisionGap::None) {
      e.why = du::float32_fallback_why("matmul", dt, gap);
      continue;
    }
    try {
      auto [a, b, c] = descs(run);
      const dnnl::memory::desc b_any =
          pack_b ? dnnl::memory::desc(b.dims(), b.data_type(), dnnl::memory::format_tag::any) : b;
      const dnnl::memory::desc bias =
          bias_dims.empty() ? dnnl::memory::desc() : du::plain_desc(bias_dims, run);
      dnnl::matmul::primitive_desc pd(bias_dims.empty() ? dnnl::matmul::desc(a, b_any, c)
                                                        : dnnl::matmul::desc(a, b_any, bias, c),
                                      attr, du::engine());
      if (run != DataType::Float && du::is_reference_impl(pd)) {
        e.why = du::float32_fallback_why("matmul", dt, du::LowPrecisionGap::Reference);
        continue;
      }
      if (primitive) e.prim = du::make_prim<dnnl::matmul>(pd);
      e.a = a, e.b = b, e.c = c;
      e.bias = bias;
      e.b_p = pd.weights_desc();
      if (e.b_p != e.b) e.b_r = du::make_reorder(e.b, e.b_p);
      e.run_dt = run;
      e.ok = true;
      return e;
    } catch (const dnnl::error&) {
      if (run != DataType::Float)
        e.why = du::float32_fallback_why("matmul", dt, du::LowPrecisionGap::None);
    }
    if (run == DataType::Float) break;
  }
  e.why =
      "oneDNN has no matmul for these operands; onyx's own loops run it, accumulating in float32";
  return e;
}

/// A node's constant weights in the layouts its primitives ask for, one copy per layout: the
/// entries of different row counts (sequence lengths, batches) mostly share one, so dynamic
/// shapes do not multiply the weights' memory.
class PackedWeights {
 public:
  /// B as entry `e`'s primitive reads it: packed (once per layout) when the entry has a
  /// reorder, which only constant weights get (make_matmul's pack_b); else B itself, converted
  /// to float32 when the primitive runs in float32 for a 16-bit B.
  Tensor get(KernelContext& ctx, const MatMulEntry& e, const Tensor& B) const {
    const bool convert = e.run_dt != B.dtype();
    if (!e.b_r) return convert ? du::to_float32(ctx, B) : B;
    std::lock_guard<std::mutex> lock(mu_);
    for (Pack& p : packs_)
      if (p.layout == e.b_p) {
        p.ahead = false;
        return p.data;
      }
    // A pack made ahead in a layout no run has asked for is not kept beside this one.
    std::erase_if(packs_, [](const Pack& p) { return p.ahead; });
    Tensor plain = convert ? du::to_float32(ctx, B) : B;
    Tensor packed = Tensor::empty(DataType::UInt8, {static_cast<int64_t>(e.b_p.get_size())});
    du::execute(ctx, *e.b_r,
                {{DNNL_ARG_FROM, du::wrap(e.b, plain.raw())},
                 {DNNL_ARG_TO, du::wrap(e.b_p, packed.raw())}});
    packs_.push_back({e.b_p, packed, false});
    return packed;
  }

  /// Packs B for entry `e` at session creation (Kernel::prepare), where the primitive reads B
  /// in its own dtype; the first run that asks for this layout finds it made.
  /// Returns the bytes packed (0: the primitive reads B as it is, or not in B's dtype).
  size_t make_ahead(const MatMulEntry& e, const Tensor& B, std::string_view who) const {
    if (!e.ok || !e.b_r || e.run_dt != B.dtype()) return 0;
    Tensor packed = Tensor::empty(DataType::UInt8, {static_cast<int64_t>(e.b_p.get_size())});
    du::execute(who, *e.b_r,
                {{DNNL_ARG_FROM, du::wrap(e.b, B.raw())}, {DNNL_ARG_TO, du::wrap(e.b_p, packed.raw())}});
    std::lock_guard<std::mutex> lock(mu_);
    packs_.push_back({e.b_p, packed, true});
    return packed.nbytes();
  }

 private:
  struct Pack {
    dnnl::memory::desc layout;
    Tensor data;
    bool ahead;  // made by make_ahead and not asked for by a run yet
  };
  mutable std::mutex mu_;
  mutable std::vector<Pack> packs_;
};

/// Rows of a matrix product's A as far as the graph's inferred shapes tell before any run:
/// the product of A's dims but its last (the first with transA).
struct KnownRows {
  int64_t exact = 0;     // every dim fixed: the rows; 0 when some dim is not
  int64_t at_least = 0;  // the fixed dims alone (a symbolic dim counted as 1): a lower bound for
                         // any run but an empty one; 0 when A's shape is not known
  /// The rows prepare() packs for: exact, else a batch of 1 (the convolutions' guess too). A
  /// torch export's dynamic batch left BERT-base's panels to the first run (436 of its 717 ms
  /// at 1 thread) beside a oneDNN pack made ahead that no run read.
  int64_t guess() const { return exact > 0 ? exact : at_least; }
};

/// KnownRows of `node`'s A; both 0 when the declared dims make more rows than any tensor could
/// hold (a malformed model's).
KnownRows known_rows(const Node& node, bool trans_a, bool gemm) {
  constexpr int64_t kMaxRows = int64_t{1} << 31;
  if (!node.has_input(0) || !node.inputs[0]->type.is_tensor() || !node.inputs[0]->type.shape)
    return {};
  const SymShape& a = *node.inputs[0]->type.shape;
  if (a.empty()) return {};
  if (a.size() == 1) return {1, 1};
  size_t first = 0, last = a.size() - 1;  // the dims that make rows: [first, last)
  if (gemm) {
    if (a.size() != 2) return {};
    first = trans_a ? 1 : 0;
    last = first + 1;
  }
  KnownRows rows{1, 1};
  for (size_t i = first; i < last; ++i) {
    if (!a[i].is_fixed()) {
      rows.exact = 0;
      continue;
    }
    if (a[i].value > kMaxRows) return {};
    rows.at_least *= a[i].value;
    if (rows.exact) rows.exact *= a[i].value;
    if (rows.at_least > kMaxRows) return {};
  }
  return rows;
}

/// Whether a constant weight is worth packing at session creation: not when the product may
/// have one row, where a float32 product is gemv_f32's, which reads B as stored (an MLP of
/// dynamic batch run one sample at a time never reads a pack; making one took half its
/// creation + first run), and the first run with more rows packs it instead.
bool pack_ahead(const KnownRows& rows, bool gemv_eligible) {
  if (!gemv_eligible) return true;
  return rows.exact > 1 || (rows.exact == 0 && rows.at_least > 1);
}

/// Rows a weight is packed for ahead of the runs when A's are not known: oneDNN 2.6's
/// float32 matmul picks B's layout from K, N and the ISA alone (measured on AVX-512 for 2 to
/// 4096 rows); should another build differ, the first run packs its own layout and the one made
/// ahead is dropped.
constexpr int64_t kAheadRows = 128;

/// Plain strides of `shape` with the last two swapped when `trans`: the logical operand of
/// a transposed physical tensor.
Shape operand_strides(const Shape& physical, bool trans) {
  Shape st(physical.size(), 1);
  for (int64_t i = static_cast<int64_t>(physical.size()) - 2; i >= 0; --i)
    st[i] = st[i + 1] * physical[i + 1];
  if (trans && st.size() >= 2) std::swap(st[st.size() - 1], st[st.size() - 2]);
  return st;
}

using Activation = MatMulActivation;

template <typename Acc>
Acc activate(Acc v, Activation act) {
  switch (act) {
    case Activation::None: return v;
    case Activation::Relu: return v > Acc(0) ? v : Acc(0);
    case Activation::Gelu: return Acc(0.5) * v * (Acc(1) + std::erf(v * Acc(M_SQRT1_2)));
    case Activation::GeluTanh: {
      const Acc k = Acc(M_2_SQRTPI * M_SQRT1_2);  // sqrt(2 / pi)
      return Acc(0.5) * v * (Acc(1) + std::tanh(k * (v + Acc(0.044715) * v * v * v)));
    }
  }
  return v;
}

/// y[i, j] = act(y[i, j] + bias[j]) over `rows` rows of n: the epilogue of the paths that do not
/// run it inside oneDNN's primitive (a one-row product, 0-width K, double, no oneDNN matmul).
void add_bias_activate(const Tensor& bias, Tensor& Y, int64_t n, Activation act, int threads) {
  const int64_t rows = Y.numel() / n;
  using Types = TypeList<float, double, float16, bfloat16>;
  dispatch<Types>(Y.dtype(), "FusedMatMulBias", [&]<typename T>() {
    using Acc = acc_t<T>;
    T* y = Y.data<T>();
    const T* b = bias.data<T>();
    parallel_for(rows, threads, std::max<int64_t>(1, 16384 / n), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        for (int64_t j = 0; j < n; ++j)
          y[i * n + j] = static_cast<T>(
              activate<Acc>(static_cast<Acc>(y[i * n + j]) + static_cast<Acc>(b[j]), act));
    });
  });
}

/// MatMul, and com.microsoft FusedMatMul = alpha * op(A) x op(B), where op transposes the last
/// two dims (the optimizer folds a Transpose into MatMul this way; ONNX Runtime's optimized
/// models carry the same op). transBatchA/B are not supported.
/// ai.onyx FusedMatMulBias(A, B, bias) = act(A x op(B) + bias): B 2-D, bias [N] or [1, .., N],
/// act per the `activation` attribute; the optimizer writes it for a product followed by a bias
/// Add (inference/fusions_matmul.cpp) and oneDNN runs the bias and act as epilogue.
class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelInfo& info)
      : attrs_(info),
        rows_(known_rows(info.node, attrs_.trans_a, false)),
        label_(info.label()) {
    if (const Tensor* b = info.constant_input(1)) b_const_ = *b;
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.required_input(0);
    const Tensor& B = ctx.required_input(1);
    bool ta = false, tb = false;
    const MatMulShape s = matmul_run_shape(ctx, attrs_, ta, tb);
    const Tensor* bias = attrs_.bias ? &ctx.required_input(2) : nullptr;
    Tensor& Y = ctx.allocate_output(0, A.dtype(), s.out);
    if (Y.numel() == 0) return;
    auto epilogue = [&] {
      if (bias) add_bias_activate(*bias, Y, s.N, attrs_.act, ctx.threads());
    };
    if (s.K == 0) {
      std::memset(Y.raw(), 0, Y.nbytes());
      epilogue();
      return;
    }
    if (A.dtype() == DataType::Float && s.M == 1 && shape_numel(s.batch) == 1 &&
        attrs_.alpha == 1.0f) {
      gemv_f32(s.K, s.N, A.data<float>(), B.data<float>(), tb, Y.data<float>(), ctx.threads());
      epilogue();
      return;
    }
    if (const int64_t rows = panel_rows(A, s, ta)) {
      panel_gemm_run(rows, A.data<float>(), panel_.get(*b_const_, tb, ctx.threads()),
                     Y.data<float>(), bias ? bias->data<float>() : nullptr, attrs_.act,
                     ctx.threads());
      return;
    }
    if (run_blocked(ctx, A, B, s, ta, tb, Y)) {
      epilogue();
      return;
    }
    if (dnnl_float(A.dtype())) {
      bool fused_epilogue = false;
      if (run_dnnl(ctx, s, A, B, bias, Y, ta, tb, fused_epilogue)) {
        if (!fused_epilogue) epilogue();
        return;
      }
    }
    dispatch<MatMulTypes>(A.dtype(), ctx.label(), [&]<typename T>() {
      ref_matmul<T>(s, A.data<T>(), B.data<T>(), Y.data<T>(), ctx.threads(), ta, tb);
      if (attrs_.alpha != 1.0f) {
        T* y = Y.data<T>();
        const int64_t n = Y.numel();
        for (int64_t i = 0; i < n; ++i)
          y[i] = static_cast<T>(static_cast<acc_t<T>>(attrs_.alpha) *
                                static_cast<acc_t<T>>(y[i]));
      }
    });
    epilogue();
  }

 private:
  /// A float32 product of a 2-D B (shared by every batch of A) on blocked_sgemm where it suits
  /// the shape (training's products: B is a weight that changes every step, or an activation).
  bool run_blocked(KernelContext& ctx, const Tensor& A, const Tensor& B, const MatMulShape& s,
                   bool ta, bool tb, Tensor& Y) const {
    if (b_const_ || A.dtype() != DataType::Float || B.dtype() != DataType::Float ||
        attrs_.alpha != 1.0f || shape_numel(s.b_batch) != 1 || (ta && shape_numel(s.a_batch) != 1))
      return false;
    const int64_t rows = shape_numel(s.a_batch) * s.M;
    if (!blocked_sgemm_suits(rows, s.N, s.K)) return false;
    blocked_sgemm(rows, s.N, s.K, A.data<float>(), ta ? s.M : s.K, ta, B.data<float>(),
                  tb ? s.K : s.N, tb, Y.data<float>(), s.N, nullptr, ctx.threads());
    return true;
  }

  /// The rows of a float32 product by a constant 2-D B that panel_gemm runs (every batch of A
  /// is rows of one [rows, K] operand), or 0 when it is oneDNN's.
  int64_t panel_rows(const Tensor& A, const MatMulShape& s, bool ta) const {
    if (A.dtype() != DataType::Float || !b_const_ || b_const_->dtype() != DataType::Float ||
        b_const_->rank() != 2 || ta || attrs_.alpha != 1.0f || shape_numel(s.b_batch) != 1)
      return 0;
    const int64_t rows = shape_numel(s.a_batch) * s.M;
    return panel_gemm_suits(rows) ? rows : 0;
  }

  /// oneDNN's matmul; false when it has none for these operands. `bias` (FusedMatMulBias) is
  /// added, and attrs_.act applied, inside the primitive when B is shared by every row
  /// (`fused_epilogue` tells), else by the caller.
  bool run_dnnl(KernelContext& ctx, const MatMulShape& s, const Tensor& A, const Tensor& B,
                const Tensor* bias, Tensor& Y, bool ta, bool tb, bool& fused_epilogue) const {
    du::ThreadScope threads(ctx.threads());
    DataType dt = A.dtype();
    du::PrimitiveCache<MatMulEntry>::Key key{static_cast<int64_t>(dt), ctx.threads(), s.M, s.N,
                                             s.K, ta, tb};
    key.insert(key.end(), s.a_batch.begin(), s.a_batch.end());
    key.push_back(-1);
    key.insert(key.end(), s.b_batch.begin(), s.b_batch.end());
    auto e = cache_.get(key, [&] {
      dnnl::primitive_attr attr = du::scratch_attr();
      if (attrs_.alpha != 1.0f) attr.set_output_scales(0, {attrs_.alpha});
      // B shared by every batch (and A not transposed): one [batch*M, K] x [K, N] product.
      if (shape_numel(s.b_batch) == 1 && !ta)
        return shared_b_entry(dt, shape_numel(s.a_batch) * s.M, s.K, s.N, tb, bias != nullptr);
      Shape ad = s.a_batch, bd = s.b_batch, cd = s.batch;
      ad.insert(ad.end(), {s.M, s.K});
      bd.insert(bd.end(), {s.K, s.N});
      cd.insert(cd.end(), {s.M, s.N});
      return make_matmul(dt, attr, [&](DataType run) {
        return std::tuple{du::strided_desc(ad, run, operand_strides(logical_shape(ad, ta), ta)),
                          du::strided_desc(bd, run, operand_strides(logical_shape(bd, tb), tb)),
                          du::plain_desc(cd, run)};
      });
    });
    if (dt != DataType::Float && e->run_dt != dt)
      du::note_slow_path(ctx.node().op_type, dt, e->why);
    if (!e->ok) return false;
    Tensor a = e->run_dt == dt ? A : du::to_float32(ctx, A);
    Tensor y = e->run_dt == dt ? Y : ctx.scratch(DataType::Float, Y.shape());
    Tensor b = packed_.get(ctx, *e, B);
    panel_.drop_unread_ahead();
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, du::wrap(e->a, a.raw())},
        {DNNL_ARG_WEIGHTS, du::wrap(e->b_p, b.raw())},
        {DNNL_ARG_DST, du::wrap(e->c, y.raw())}};
    Tensor bias_run;
    fused_epilogue = !e->bias.is_zero();
    if (fused_epilogue) {
      bias_run = e->run_dt == dt ? *bias : du::to_float32(ctx, *bias);
      args.emplace(DNNL_ARG_BIAS, du::wrap(e->bias, bias_run.raw()));
    }
    du::execute(ctx, e->prim, args);
    if (e->run_dt != dt) du::from_float32(y, Y, ctx.threads());
    return true;
  }

  /// The matmul of `rows` rows of A by a B shared by all of them (K x N, stored transposed with
  /// `tb`), alpha as output scale, FusedMatMulBias's bias and activation as epilogue.
  MatMulEntry shared_b_entry(DataType dt, int64_t rows, int64_t K, int64_t N, bool tb,
                             bool bias, bool primitive = true) const {
    dnnl::primitive_attr attr = du::scratch_attr();
    if (attrs_.alpha != 1.0f) attr.set_output_scales(0, {attrs_.alpha});
    if (bias && attrs_.act != Activation::None) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f,
                         attrs_.act == Activation::Relu   ? dnnl::algorithm::eltwise_relu
                         : attrs_.act == Activation::Gelu ? dnnl::algorithm::eltwise_gelu_erf
                                                          : dnnl::algorithm::eltwise_gelu_tanh,
                         0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    return make_matmul(
        dt, attr,
        [&](DataType run) {
          return std::tuple{du::plain_desc({rows, K}, run),
                            du::strided_desc({K, N}, run, tb ? Shape{1, K} : Shape{N, 1}),
                            du::plain_desc({rows, N}, run)};
        },
        b_const_.has_value(), bias ? Shape{1, N} : Shape{}, primitive);
  }

 public:
  /// Packs a constant 2-D B for oneDNN now rather than in the first run, unless the product
  /// may have one row (pack_ahead) or A is transposed (no shared B).
  size_t prepare(int threads) override {
    if (!b_const_ || b_const_->rank() != 2 || !dnnl_float(b_const_->dtype()) ||
        attrs_.trans_a)
      return 0;
    const Tensor& B = *b_const_;
    if (!pack_ahead(rows_, B.dtype() == DataType::Float && attrs_.alpha == 1.0f)) return 0;
    const bool tb = attrs_.trans_b;
    const int64_t K = B.shape()[tb ? 1 : 0], N = B.shape()[tb ? 0 : 1];
    if (K == 0 || N == 0) return 0;
    if (B.dtype() == DataType::Float && attrs_.alpha == 1.0f &&
        panel_gemm_suits(rows_.guess()))
      return panel_.make_ahead(B, tb, threads);
    du::ThreadScope scope(threads);
    const int64_t rows = rows_.exact > 0 ? rows_.exact : kAheadRows;
    return packed_.make_ahead(shared_b_entry(B.dtype(), rows, K, N, tb, attrs_.bias, false), B,
                              label_);
  }

 private:
  MatMulAttrs attrs_;
  // B when it is an initializer: packed once per layout (packed_), ahead of the runs by
  // prepare().
  std::optional<Tensor> b_const_;
  KnownRows rows_;                 // rows of A as known at creation
  std::string label_;
  du::PrimitiveCache<MatMulEntry> cache_;
  PackedWeights packed_;
  PanelWeights panel_;  // B for panel_gemm, packed when a run (or prepare) first needs it
};

/// Y = alpha * A' * B' + beta * C with C broadcast to [M, N].
/// ai.onyx GemmCast is the same product without C, written as float32 from 16-bit float operands
/// (attribute `to` = FLOAT): mixed precision's weight gradients, whose products run in bf16/fp16
/// and whose Cast back to float32 read and wrote every gradient once more (fuse_cast_into_gemm).
class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 1.0f)),
        beta_(info.node.attr_float("beta", 1.0f)),
        trans_a_(info.node.attr_int("transA", 0) != 0),
        trans_b_(info.node.attr_int("transB", 0) != 0),
        rows_(known_rows(info.node, trans_a_, true)),
        with_c_(info.node.has_input(2) && beta_ != 0.0f),
        to_(info.node.has_attr("to") ? static_cast<DataType>(info.node.attr_int("to", 0))
                                     : DataType::Undefined),
        label_(info.label()) {
    if (const Tensor* b = info.constant_input(1)) b_const_ = *b;
    ONYX_CHECK(to_ == DataType::Undefined || (to_ == DataType::Float && !info.node.has_input(2)),
               "[{}] GemmCast writes float32 (to = FLOAT) and has no C; got to {}{}",
               info.label(), dtype_name(to_), info.node.has_input(2) ? " and a C input" : "");
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.required_input(0);
    const Tensor& B = ctx.required_input(1);
    const Tensor* C = ctx.input(2);
    DataType dt = A.dtype();
    // Named copies, not a structured binding: lambdas below capture them, which clang 14 refuses
    // for bindings (a C++20 extension it lacks).
    const auto shape = gemm_shape(ctx, trans_a_, trans_b_);
    const int64_t M = shape.M, N = shape.N, K = shape.K, cm = shape.cm, cn = shape.cn;
    bool use_c = C && beta_ != 0.0f;
    if (to_ != DataType::Undefined && to_ != dt) {
      cast_product(ctx, A, B, M, N, K);
      return;
    }
    Tensor& Y = ctx.allocate_output(0, dt, {M, N});
    if (Y.numel() == 0) return;
    if (dt == DataType::Float && M == 1 && K > 0) {
      float* y = Y.data<float>();
      gemv_f32(K, N, A.data<float>(), B.data<float>(), trans_b_, y, ctx.threads());
      const float* c = use_c ? C->data<float>() : nullptr;
      for (int64_t j = 0; j < N; ++j)
        y[j] = alpha_ * y[j] + (c ? beta_ * c[cn == 1 ? 0 : j] : 0.0f);
      return;
    }
    // panel_gemm adds C after the whole sum, as oneDNN's sum post-op does: a row of N only.
    if (dt == DataType::Float && K > 0 && panel_suits(M) &&
        (!use_c || (beta_ == 1.0f && cm == 1 && cn == N && C->dtype() == DataType::Float))) {
      panel_gemm_run(M, A.data<float>(), panel_.get(*b_const_, trans_b_, ctx.threads()),
                     Y.data<float>(), use_c ? C->data<float>() : nullptr,
                     MatMulActivation::None, ctx.threads());
      return;
    }
    // blocked_sgemm adds C as a bias row, the one C it takes.
    if (!b_const_ && dt == DataType::Float && B.dtype() == DataType::Float && alpha_ == 1.0f &&
        K > 0 &&
        (!use_c || (beta_ == 1.0f && cm == 1 && cn == N && C->dtype() == DataType::Float)) &&
        blocked_sgemm_suits(M, N, K)) {
      blocked_sgemm(M, N, K, A.data<float>(), trans_a_ ? M : K, trans_a_, B.data<float>(),
                    trans_b_ ? K : N, trans_b_, Y.data<float>(), N,
                    use_c ? C->data<float>() : nullptr, ctx.threads());
      return;
    }
    if (dnnl_float(dt) && K > 0 && run_dnnl(ctx, A, B, use_c ? C : nullptr, M, N, K, cm, cn, Y))
      return;
    dispatch<MatMulTypes>(dt, ctx.label(), [&]<typename T>() {
      using Acc = acc_t<T>;
      T* y = Y.data<T>();
      const T* a = A.data<T>();
      ref_gemm<T>(M, N, K, a, trans_a_ ? 1 : K, trans_a_ ? M : 1, B.data<T>(), trans_b_ ? 1 : N,
                  trans_b_ ? K : 1, y, ctx.threads());
      const T* c = use_c ? C->data<T>() : nullptr;
      Acc alpha = static_cast<Acc>(alpha_), beta = static_cast<Acc>(beta_);
      parallel_for(M, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t i = b; i < e; ++i)
                       for (int64_t j = 0; j < N; ++j) {
                         Acc v = alpha * static_cast<Acc>(y[i * N + j]);
                         if (c)
                           v += beta *
                                static_cast<Acc>(c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)]);
                         y[i * N + j] = static_cast<T>(v);
                       }
                   });
    });
  }

 private:
  /// Whether a product of M rows runs on panel_gemm (a constant float32 B, no transA, alpha 1).
  bool panel_suits(int64_t M) const {
    return b_const_ && b_const_->dtype() == DataType::Float && b_const_->rank() == 2 &&
           !trans_a_ && alpha_ == 1.0f && panel_gemm_suits(M);
  }

  /// Above this K, GemmCast's 16-bit product is written in its own type and widened after: with
  /// a float32 dst, oneDNN 2.6's AMX kernel took longer than the 16-bit product and the Cast
  /// together from K = 1024 on (2048 x 512 outputs: 4.8 against 4.0 + 0.6 ms in a BERT step;
  /// alone, K 64-512: 0.66-0.98x their time, K 4096: 1.03x).
  static constexpr int64_t kFloatDstMaxK = 512;

  /// GemmCast: the 16-bit product written as float32 by oneDNN (its dst in float32: the float32
  /// accumulator rounded once instead of twice) up to kFloatDstMaxK; beyond, rounded to the
  /// 16-bit type and widened, as the unfused graph computes it. Where oneDNN has no fast 16-bit
  /// path, the operands widened to float32 give the float32 accumulator (a one-time log line
  /// says so).
  void cast_product(KernelContext& ctx, const Tensor& A, const Tensor& B, int64_t M, int64_t N,
                    int64_t K) const {
    const DataType dt = A.dtype();
    ONYX_CHECK(B.dtype() == dt && (dt == DataType::BFloat16 || dt == DataType::Float16),
               "[{}] GemmCast expects A and B of one type, bfloat16 or float16; got {} and {}",
               ctx.label(), dtype_name(dt), dtype_name(B.dtype()));
    Tensor& Y = ctx.allocate_output(0, DataType::Float, {M, N});
    if (Y.numel() == 0) return;
    if (K == 0) {
      std::memset(Y.raw(), 0, Y.nbytes());
      return;
    }
    du::ThreadScope threads(ctx.threads());
    if (K > kFloatDstMaxK) {
      // run_dnnl's own 16-bit product (its cache entry), when oneDNN runs it natively.
      du::PrimitiveCache<MatMulEntry>::Key low_key{static_cast<int64_t>(dt), ctx.threads(), M, N,
                                                   K, false};
      auto e16 = cache_.get(low_key, [&] { return entry(dt, M, N, K, false); });
      if (e16->ok && e16->run_dt == dt) {
        Tensor low = ctx.scratch(dt, {M, N});
        run_dnnl(ctx, A, B, nullptr, M, N, K, 1, 1, low);
        dispatch<TypeList<float16, bfloat16>>(dt, ctx.label(), [&]<typename T>() {
          const T* in = low.data<T>();
          float* out = Y.data<float>();
          parallel_for(M * N, ctx.threads(), 1 << 15,
                       [&](int64_t lo, int64_t hi) { widen(in + lo, out + lo, hi - lo); });
        });
        return;
      }
    }
    du::PrimitiveCache<MatMulEntry>::Key key{static_cast<int64_t>(dt), ctx.threads(), M, N, K,
                                             0, static_cast<int64_t>(DataType::Float)};
    auto e = cache_.get(key, [&] { return entry(dt, M, N, K, false, true, DataType::Float); });
    if (e->run_dt != dt) du::note_slow_path("GemmCast", dt, e->why);
    const Tensor a = e->run_dt == dt ? A : du::to_float32(ctx, A);
    if (e->ok) {
      const Tensor b = packed_.get(ctx, *e, B);
      panel_.drop_unread_ahead();
      du::execute(ctx, e->prim,
                  {{DNNL_ARG_SRC, du::wrap(e->a, a.raw())},
                   {DNNL_ARG_WEIGHTS, du::wrap(e->b_p, b.raw())},
                   {DNNL_ARG_DST, du::wrap(e->c, Y.raw())}});
      return;
    }
    const Tensor b = du::to_float32(ctx, B);
    float* y = Y.data<float>();
    ref_gemm<float>(M, N, K, a.data<float>(), trans_a_ ? 1 : K, trans_a_ ? M : 1, b.data<float>(),
                    trans_b_ ? 1 : N, trans_b_ ? K : 1, y, ctx.threads());
    if (alpha_ != 1.0f)
      for (int64_t i = 0; i < M * N; ++i) y[i] *= alpha_;
  }

  bool run_dnnl(KernelContext& ctx, const Tensor& A, const Tensor& B, const Tensor* C, int64_t M,
                int64_t N, int64_t K, int64_t cm, int64_t cn, Tensor& Y) const {
    du::ThreadScope threads(ctx.threads());
    DataType dt = A.dtype();
    du::PrimitiveCache<MatMulEntry>::Key key{
        static_cast<int64_t>(dt), ctx.threads(), M, N, K, C != nullptr};
    auto e = cache_.get(key, [&] { return entry(dt, M, N, K, C != nullptr); });
    if (dt != DataType::Float && e->run_dt != dt)
      du::note_slow_path(ctx.node().op_type, dt, e->why);
    if (!e->ok) return false;
    bool conv = e->run_dt != dt;
    Tensor a = conv ? du::to_float32(ctx, A) : A;
    Tensor b = packed_.get(ctx, *e, B);
    panel_.drop_unread_ahead();
    Tensor y = conv ? ctx.scratch(DataType::Float, Y.shape()) : Y;
    if (C) {
      // The sum post-op adds beta * (what dst holds): fill dst with broadcast C first.
      Tensor c = conv ? du::to_float32(ctx, *C) : *C;
      dispatch_by_size(y.dtype(), ctx.label(), [&]<typename U>() {
        const U* src = c.data_as<U>();
        U* dst = y.data_as<U>();
        parallel_for(M, ctx.threads(), std::max<int64_t>(1, 16384 / N), [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            for (int64_t j = 0; j < N; ++j)
              dst[i * N + j] = src[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        });
      });
    }
    du::execute(ctx, e->prim,
                {{DNNL_ARG_SRC, du::wrap(e->a, a.raw())},
                 {DNNL_ARG_WEIGHTS, du::wrap(e->b_p, b.raw())},
                 {DNNL_ARG_DST, du::wrap(e->c, y.raw())}});
    if (conv) du::from_float32(y, Y, ctx.threads());
    return true;
  }

  /// The matmul of op(A) [M, K] by op(B) [K, N], alpha as output scale, beta * C as a sum
  /// post-op (`with_c`), the output in `out` (Undefined: the operands' run dtype).
  MatMulEntry entry(DataType dt, int64_t M, int64_t N, int64_t K, bool with_c,
                    bool primitive = true, DataType out = DataType::Undefined) const {
    dnnl::primitive_attr attr = du::scratch_attr();
    if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
    if (with_c) {
      dnnl::post_ops ops;
      ops.append_sum(beta_);
      attr.set_post_ops(ops);
    }
    return make_matmul(
        dt, attr,
        [&](DataType run) {
          return std::tuple{du::strided_desc({M, K}, run, trans_a_ ? Shape{1, M} : Shape{K, 1}),
                            du::strided_desc({K, N}, run, trans_b_ ? Shape{1, K} : Shape{N, 1}),
                            du::plain_desc({M, N}, out == DataType::Undefined ? run : out)};
        },
        b_const_.has_value(), {}, primitive);
  }

 public:
  /// Packs a constant B for oneDNN now rather than in the first run, unless the product may
  /// have one row (pack_ahead).
  size_t prepare(int threads) override {
    if (!b_const_ || b_const_->rank() != 2 || !dnnl_float(b_const_->dtype()) ||
        to_ != DataType::Undefined)
      return 0;
    const Tensor& B = *b_const_;
    if (!pack_ahead(rows_, B.dtype() == DataType::Float)) return 0;
    const int64_t K = B.shape()[trans_b_ ? 1 : 0], N = B.shape()[trans_b_ ? 0 : 1];
    if (K == 0 || N == 0) return 0;
    // The runs' C decides between panel_gemm and oneDNN only for an odd C (rare): a fixed M in
    // panel_gemm's range packs its panels.
    if (panel_suits(rows_.guess())) return panel_.make_ahead(B, trans_b_, threads);
    du::ThreadScope scope(threads);
    const int64_t M = rows_.exact > 0 ? rows_.exact : kAheadRows;
    return packed_.make_ahead(entry(B.dtype(), M, N, K, with_c_, false), B, label_);
  }

 private:
  float alpha_, beta_;
  bool trans_a_, trans_b_;
  // B when it is an initializer: packed once per layout (packed_), ahead of the runs by
  // prepare().
  std::optional<Tensor> b_const_;
  KnownRows rows_;                 // rows of op(A) as known at creation
  bool with_c_;                    // C given and beta != 0
  DataType to_;                    // GemmCast's output dtype; Undefined for Gemm
  std::string label_;
  du::PrimitiveCache<MatMulEntry> cache_;
  PackedWeights packed_;
  PanelWeights panel_;  // B for panel_gemm, packed when a run (or prepare) first needs it
};

}  // namespace

void register_matmul_kernels(KernelRegistry& r) {
  auto mm_types = float_types() + std::vector<DataType>{DataType::Int32, DataType::Int64,
                                                        DataType::UInt32, DataType::UInt64};
  r.add({.op_type = "MatMul",
         .domain = "",
         .since = 1,
         .types = mm_types,
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "FusedMatMul",
         .domain = "com.microsoft",
         .since = 1,
         .types = mm_types,
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "FusedMatMulBias",
         .domain = "ai.onyx",
         .since = 1,
         .types = float_types(),
         .create = make_factory<MatMulKernel>()});
  r.add({.op_type = "Gemm",
         .domain = "",
         .since = 1,
         .types = mm_types,
         .create = make_factory<GemmKernel>()});
  r.add({.op_type = "GemmCast",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::BFloat16, DataType::Float16},
         .create = make_factory<GemmKernel>()});
}

}  // namespace onyx::cpu
