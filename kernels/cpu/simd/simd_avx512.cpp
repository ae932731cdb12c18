// The SIMD table for AVX-512 (x86-64-v4, 512-bit vectors), picked at run time by CPUID.
#define ONYX_SIMD_NS avx512
#define ONYX_SIMD_ISA ::onyx::cpu::Isa::Avx512
#define ONYX_SIMD_LANES 16
#include "kernels/cpu/simd/simd_body.inc"
