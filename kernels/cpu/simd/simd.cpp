#include "kernels/cpu/simd/simd.h"

namespace onyx::cpu {

const SimdTable& simd_for(Isa isa) {
  // No kernel has an AVX-512-BF16 or AMX variant yet: those levels run the AVX-512 table.
  return static_cast<int>(isa) >= static_cast<int>(Isa::Avx512) ? avx512::kTable : avx2::kTable;
}

const SimdTable& simd() {
  static const SimdTable& table = simd_for(active_isa());
  return table;
}

}  // namespace onyx::cpu
