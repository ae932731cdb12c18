// Run-time choice of the instruction set our own vectorised kernels use. The default build
// targets x86-64-v3 (AVX2, FMA, F16C) so one binary runs on every host of a mixed cluster;
// the hot loops (kernels/cpu/simd/) are also compiled for AVX-512 and picked once by CPUID.
// ONYX_ISA=avx2|avx512 lowers the choice (for testing what an older host runs, or to
// compare), and lowers oneDNN's own dispatch to match, so "avx2" behaves like an AVX2 host.
#pragma once

#include <string>
#include <vector>

namespace onyx::cpu {

/// Ordered: each level includes the ones below it.
enum class Isa { Avx2 = 0, Avx512 = 1, Avx512Bf16 = 2, Amx = 3 };

/// "avx2", "avx512", "avx512_bf16", "amx".
const char* isa_name(Isa isa);

/// Every level this CPU (and its OS, for the AVX-512 and AMX register state) supports.
std::vector<Isa> supported_isas();

/// The best level this CPU supports.
Isa best_isa();

/// Parses an ONYX_ISA value ("avx2", "avx512", "avx512_bf16", "amx" or "native"/"" for the
/// best) and checks it against `best`. Throws onyx::Error naming the allowed values, or the
/// level the CPU lacks.
Isa parse_isa(const std::string& value, Isa best);

/// True on an Intel CPU (CPUID vendor "GenuineIntel").
bool intel_cpu();

/// The level the kernels use in this process: best_isa(), lowered by ONYX_ISA. Decided once
/// (thread-safe); the first call also caps oneDNN's ISA when ONYX_ISA asks for less than
/// the CPU has. Throws onyx::Error for a bad ONYX_ISA value (on every call).
Isa active_isa();

}  // namespace onyx::cpu
