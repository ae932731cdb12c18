#include "kernels/cpu/int8_util.h"

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

bool all_zero(const Tensor& t) {
  for (int64_t v : t.to_int64_vector())
    if (v != 0) return false;
  return true;
}

int32_t int8_scalar(const Tensor& t) {
  return t.dtype() == DataType::UInt8 ? int32_t(*t.data<uint8_t>()) : int32_t(*t.data<int8_t>());
}

Tensor PackedInt8Weights::get(KernelContext& ctx, const Tensor& W, const dnnl::memory::desc& plain,
                              const dnnl::memory::desc& packed, const du::Prim* reorder) const {
  if (!reorder) return W;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [layout, t] : packs_)
    if (layout == packed) return t;
  Tensor p = Tensor::empty(DataType::UInt8, {static_cast<int64_t>(packed.get_size())});
  du::execute(ctx, *reorder, {{DNNL_ARG_FROM, du::wrap(plain, W.raw())}, {DNNL_ARG_TO, du::wrap(packed, p.raw())}});
  packs_.emplace_back(packed, p);
  return p;
}

}  // namespace onyx::cpu
