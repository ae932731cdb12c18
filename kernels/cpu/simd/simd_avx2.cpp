// The SIMD table for AVX2 + FMA (x86-64-v3), the baseline every host we support has.
#define ONYX_SIMD_NS avx2
#define ONYX_SIMD_ISA ::onyx::cpu::Isa::Avx2
#define ONYX_SIMD_LANES 8
#include "kernels/cpu/simd/simd_body.inc"
