#include "kernels/cpu/int8_matmul.h"

#include "kernels/parallel.h"

namespace onyx::cpu {

namespace du = dnnl_util;

Int8MatMul::Int8MatMul(const Tensor* constant_b) {
  if (constant_b) b_const_ = *constant_b;
}

const std::vector<int32_t>& Int8MatMul::column_sums() const {
  std::call_once(sums_once_, [&] {
    const int64_t K = b_const_->dim(0), N = b_const_->dim(1);
    const int8_t* b = b_const_->data<int8_t>();
    col_sums_.assign(static_cast<size_t>(N), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) col_sums_[n] += b[k * N + n];
  });
  return col_sums_;
}

bool Int8MatMul::run(KernelContext& ctx, const Tensor& A, const Tensor* a_zp, const Tensor& B,
                     const Tensor* b_zp, Tensor* into) const {
  const DataType adt = A.dtype();
  if ((adt != DataType::UInt8 && adt != DataType::Int8) || B.dtype() != DataType::Int8 ||
      A.rank() < 2 || B.rank() != 2 || !exact_int8_dot_products())
    return false;
  if (a_zp && (a_zp->numel() != 1 || a_zp->dtype() != adt)) return false;
  if (b_zp && !all_zero(*b_zp)) return false;
  const int64_t K = A.shape().back(), N = B.dim(1);
  if (B.dim(0) != K || K == 0 || N == 0) return false;
  const int64_t rows = A.numel() / K;
  if (rows == 0) return false;
  du::ThreadScope threads(ctx.threads());
  // The node's own constant B (not one fed in its place) is packed once.
  const bool pack = b_const_ && b_const_->raw() == B.raw();
  // With a packed B and uint8 A, the zero point is applied here: (A - z) B = A B - z colsum(B).
  // Asking oneDNN for it puts a compensation into B's layout, whose reorder (a reference loop)
  // took 4x a BERT-base run to pack its weights.
  const bool own_zp = pack && adt == DataType::UInt8;
  du::PrimitiveCache<Entry>::Key key{static_cast<int64_t>(adt), ctx.threads(), rows, K, N,
                                     a_zp != nullptr, pack};
  auto e = cache_.get(key, [&] {
    Entry en;
    try {
      dnnl::primitive_attr attr = du::scratch_attr();
      if (a_zp && !own_zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      en.a = du::plain_desc({rows, K}, adt);
      en.b = du::plain_desc({K, N}, DataType::Int8);
      en.c = du::plain_desc({rows, N}, DataType::Int32);
      en.zp = du::plain_desc({1}, DataType::Int32);
      const dnnl::memory::desc b_any =
          pack ? dnnl::memory::desc(en.b.dims(), en.b.data_type(), dnnl::memory::format_tag::any) : en.b;
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(en.a, b_any, en.c), attr, du::engine());
      if (du::is_reference_impl(pd)) return en;
      en.prim = du::make_prim<dnnl::matmul>(pd);
      en.b_p = pd.weights_desc();
      if (en.b_p != en.b) en.b_r = du::make_reorder(en.b, en.b_p);
      en.ok = true;
    } catch (const dnnl::error&) {
    }
    return en;
  });
  if (!e->ok) return false;
  Shape out = A.shape();
  out.back() = N;
  Tensor& Y = into ? *into : ctx.allocate_output(0, DataType::Int32, out);
  int32_t zp = a_zp ? int8_scalar(*a_zp) : 0;
  const Tensor b = packed_.get(ctx, B, e->b, e->b_p, e->b_r ? &*e->b_r : nullptr);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, du::wrap(e->a, A.raw())},
                                             {DNNL_ARG_WEIGHTS, du::wrap(e->b_p, b.raw())},
                                             {DNNL_ARG_DST, du::wrap(e->c, Y.raw())}};
  if (a_zp && !own_zp) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, du::wrap(e->zp, &zp));
  du::execute(ctx, e->prim, args);
  if (own_zp && zp != 0) {
    // int32 sums wrap around, as the product's own do: unsigned arithmetic.
    const std::vector<int32_t>& cs = column_sums();
    uint32_t* y = static_cast<uint32_t*>(Y.raw());
    const uint32_t z = uint32_t(zp);
    parallel_for(rows, ctx.threads(), std::max<int64_t>(1, 32768 / N), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t n = 0; n < N; ++n) y[r * N + n] -= z * uint32_t(cs[n]);
    });
  }
  return true;
}

}  // namespace onyx::cpu
