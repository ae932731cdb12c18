#include "kernels/cpu/int8_matmul.h"

#include <cpuid.h>

#include "kernels/cpu/isa.h"

namespace onyx::cpu {

namespace du = dnnl_util;

bool exact_int8_dot_products() {
  static const bool vnni = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c & (1u << 11)) != 0;  // CPUID.(7,0):ECX.AVX512_VNNI
  }();
  // oneDNN's VNNI kernels are there at the CPU's own level and under a cap of avx512_bf16 or
  // above; a cap of avx512 (avx512_core) or avx2 takes them away.
  const Isa isa = active_isa();
  return vnni && (isa == best_isa() || isa >= Isa::Avx512Bf16);
}

namespace {

bool all_zero(const Tensor& t) {
  for (int64_t v : t.to_int64_vector())
    if (v != 0) return false;
  return true;
}

int32_t zero_point_value(const Tensor& t) {
  return t.dtype() == DataType::UInt8 ? int32_t(*t.data<uint8_t>()) : int32_t(*t.data<int8_t>());
}

}  // namespace

bool Int8MatMul::run(KernelContext& ctx, const Tensor& A, const Tensor* a_zp, const Tensor& B,
                     const Tensor* b_zp) const {
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
  du::PrimitiveCache<Entry>::Key key{static_cast<int64_t>(adt), ctx.threads(), rows, K, N,
                                     a_zp != nullptr};
  auto e = cache_.get(key, [&] {
    Entry en;
    try {
      dnnl::primitive_attr attr = du::scratch_attr();
      if (a_zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      en.a = du::plain_desc({rows, K}, adt);
      en.b = du::plain_desc({K, N}, DataType::Int8);
      en.c = du::plain_desc({rows, N}, DataType::Int32);
      en.zp = du::plain_desc({1}, DataType::Int32);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(en.a, en.b, en.c), attr, du::engine());
      if (du::is_reference_impl(pd)) return en;
      en.prim = du::make_prim<dnnl::matmul>(pd);
      en.ok = true;
    } catch (const dnnl::error&) {
    }
    return en;
  });
  if (!e->ok) return false;
  Shape out = A.shape();
  out.back() = N;
  Tensor& Y = ctx.allocate_output(0, DataType::Int32, out);
  int32_t zp = a_zp ? zero_point_value(*a_zp) : 0;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, du::wrap(e->a, A.raw())},
                                             {DNNL_ARG_WEIGHTS, du::wrap(e->b, B.raw())},
                                             {DNNL_ARG_DST, du::wrap(e->c, Y.raw())}};
  if (a_zp) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, du::wrap(e->zp, &zp));
  du::execute(ctx, e->prim, args);
  return true;
}

}  // namespace onyx::cpu
