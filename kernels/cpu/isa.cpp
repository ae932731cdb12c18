#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

#include "graph/error.h"
#include "kernels/cpu/dnnl_symbols.h"

namespace onyx::cpu {
namespace {

// XCR0 bits the OS sets when it saves the register state: SSE|AVX (1, 2), AVX-512's opmask
// and upper registers (5, 6, 7), AMX tile config and data (17, 18).
constexpr uint64_t kXcrAvx = 0x6, kXcrAvx512 = 0xe0, kXcrAmx = 0x60000;

uint64_t xcr0() {
  uint32_t eax, edx;
  __asm__("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

Isa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return Isa::Avx2;
  const uint64_t xcr = xcr0();
  if ((xcr & kXcrAvx) != kXcrAvx || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::Avx2;
  const unsigned ebx7 = b, edx7 = d;
  // AVX-512 as our variant is compiled for it (x86-64-v4): F, CD, BW, DQ, VL.
  const bool avx512 = (xcr & kXcrAvx512) == kXcrAvx512 && (ebx7 & bit_AVX512F) &&
                      (ebx7 & bit_AVX512CD) && (ebx7 & bit_AVX512BW) && (ebx7 & bit_AVX512DQ) &&
                      (ebx7 & bit_AVX512VL);
  if (!avx512) return Isa::Avx2;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
  const bool bf16 = a1 & (1u << 5);  // CPUID.(7,1):EAX.AVX512_BF16
  if (!bf16) return Isa::Avx512;
  const bool amx = (xcr & kXcrAmx) == kXcrAmx && (edx7 & (1u << 22)) && (edx7 & (1u << 24));
  return amx ? Isa::Amx : Isa::Avx512Bf16;
}

// oneDNN's cap for each level, so a lowered ONYX_ISA also lowers oneDNN's JIT kernels.
dnnl::cpu_isa onednn_isa(Isa isa) {
  switch (isa) {
    case Isa::Avx2: return dnnl::cpu_isa::avx2;
    case Isa::Avx512: return dnnl::cpu_isa::avx512_core;
    case Isa::Avx512Bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case Isa::Amx: return dnnl::cpu_isa::all;
  }
  return dnnl::cpu_isa::all;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512_bf16";
    case Isa::Amx: return "amx";
  }
  return "?";
}

Isa best_isa() {
  static const Isa best = detect();
  return best;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(best_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

Isa parse_isa(const std::string& value, Isa best) {
  if (value.empty() || value == "native") return best;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx}) {
    if (value != isa_name(isa)) continue;
    ONYX_CHECK(static_cast<int>(isa) <= static_cast<int>(best),
               "[cpu] ONYX_ISA={} asks for instructions this CPU lacks (it supports up to {})",
               value, isa_name(best));
    return isa;
  }
  ONYX_THROW("[cpu] ONYX_ISA='{}' is not a known level (expected avx2, avx512, avx512_bf16, "
             "amx or native)", value);
}

bool intel_cpu() {
  static const bool intel = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    // The vendor string is EBX, EDX, ECX: "Genu" "ineI" "ntel".
    return b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu;
  }();
  return intel;
}

Isa active_isa() {
  struct Choice {
    Isa isa = Isa::Avx2;
    std::string error;
  };
  static const Choice choice = [] {
    Choice c;
    // Before oneDNN's first use: its one-time GEMM set-up must run its own code (dnnl_symbols.h).
    keep_onednn_gemm_setup_per_library();
    const char* env = std::getenv("ONYX_ISA");
    try {
      c.isa = parse_isa(env ? env : "", best_isa());
    } catch (const Error& e) {
      c.error = e.what();
      return c;
    }
    if (c.isa != best_isa()) {
      try {
        dnnl::set_max_cpu_isa(onednn_isa(c.isa));
      } catch (const dnnl::error& e) {
        // oneDNN fixes its ISA at its first JIT use; ONEDNN_MAX_CPU_ISA still works then.
        spdlog::warn("[cpu] ONYX_ISA={}: oneDNN's ISA is already fixed ({}); set "
                     "ONEDNN_MAX_CPU_ISA too", env, e.what());
      }
    }
    spdlog::debug("[cpu] vectorised kernels use {} (best on this CPU: {})", isa_name(c.isa),
                  isa_name(best_isa()));
    return c;
  }();
  if (!choice.error.empty()) throw Error(choice.error);
  return choice.isa;
}

}  // namespace onyx::cpu
