#include "kernels/cpu/dnnl_symbols.h"

#include <cstdint>  // defines __GLIBC__ where the C library is glibc

#if defined(__linux__) && defined(__x86_64__) && defined(__GLIBC__)
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cstring>
#include <mutex>
#include <string_view>

namespace onyx::cpu {

namespace {

// call_once's trampoline instantiated for a lambda inside oneDNN (gemm_info_t<...>::jit_init
// and a few others): its mangled name starts with the first string and holds the second.
constexpr std::string_view kTrampoline = "_ZZNSt9once_flag18_Prepare_execution";
constexpr std::string_view kOneDnn = "N4dnnl4impl";

bool is_onednn_trampoline(const char* name) {
  const std::string_view n(name);
  return n.substr(0, kTrampoline.size()) == kTrampoline && n.find(kOneDnn) != std::string_view::npos;
}

struct Repairs {
  int rebound = 0, failed = 0;
};

// Points `slot` at `target`; the slot may lie in the write-protected part (PT_GNU_RELRO).
bool write_slot(uintptr_t* slot, uintptr_t target, bool protected_after_load) {
  if (!protected_after_load) {
    __atomic_store_n(slot, target, __ATOMIC_RELEASE);
    return true;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(slot) & ~(page - 1));
  if (mprotect(start, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, target, __ATOMIC_RELEASE);
  mprotect(start, page, PROT_READ);
  return true;
}

int repair_object(dl_phdr_info* info, size_t, void* data) {
  auto* repairs = static_cast<Repairs*>(data);
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  uintptr_t relro_lo = 0, relro_hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn)*>(base + ph.p_vaddr);
    if (ph.p_type == PT_GNU_RELRO) {
      // The loader write-protects the whole pages of this range only: a partial last page
      // stays writable, and must not be left read-only by write_slot.
      const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
      relro_lo = (base + ph.p_vaddr) & ~(page - 1);
      relro_hi = (base + ph.p_vaddr + ph.p_memsz) & ~(page - 1);
    }
  }
  if (!dyn) return 0;
  // glibc relocates the address entries of a loaded object's dynamic section in place; an entry
  // below the load address has not been (another loader), so it is added.
  auto addr = [base](ElfW(Addr) p) { return p < base ? p + base : p; };
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0}, relative = 0;
  bool rela_plt = true;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(addr(d->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(addr(d->d_un.d_ptr)); break;
      case DT_RELA: tables[0] = reinterpret_cast<const ElfW(Rela)*>(addr(d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[0] = d->d_un.d_val; break;
      case DT_JMPREL: tables[1] = reinterpret_cast<const ElfW(Rela)*>(addr(d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[1] = d->d_un.d_val; break;
      case DT_PLTREL: rela_plt = d->d_un.d_val == DT_RELA; break;
      case DT_RELACOUNT: relative = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return 0;
  if (!rela_plt) tables[1] = nullptr;
  for (int t = 0; t < 2; ++t) {
    if (!tables[t]) continue;
    // DT_RELA starts with its DT_RELACOUNT relative relocations (no symbol): skipped unread,
    // they are most of a large library's table (0.6 ms of libcublasLt's otherwise).
    for (size_t i = t == 0 ? relative : 0; i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      const auto type = ELF64_R_TYPE(r.r_info);
      if (type != R_X86_64_GLOB_DAT && type != R_X86_64_JUMP_SLOT) continue;
      const ElfW(Sym)& s = symtab[ELF64_R_SYM(r.r_info)];
      if (s.st_shndx == SHN_UNDEF || s.st_value == 0 || ELF64_ST_TYPE(s.st_info) != STT_FUNC ||
          !is_onednn_trampoline(strtab + s.st_name))
        continue;
      auto* slot = reinterpret_cast<uintptr_t*>(base + r.r_offset);
      const uintptr_t own = base + s.st_value;
      if (*slot == own) continue;
      const bool relro = base + r.r_offset >= relro_lo && base + r.r_offset < relro_hi;
      if (write_slot(slot, own, relro))
        ++repairs->rebound;
      else
        ++repairs->failed;
    }
  }
  return 0;
}

}  // namespace

void keep_onednn_gemm_setup_per_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    Repairs repairs;
    dl_iterate_phdr(repair_object, &repairs);
    if (repairs.rebound)
      spdlog::debug("[cpu] {} reference(s) to another oneDNN copy's call_once trampolines "
                    "pointed back at their own library's", repairs.rebound);
    if (repairs.failed)
      spdlog::warn("[cpu] {} reference(s) from a oneDNN copy to another copy's one-time GEMM "
                   "set-up could not be rebound (mprotect refused): oneDNN's GEMM-based "
                   "primitives may fail in this process", repairs.failed);
  });
}

}  // namespace onyx::cpu

#else

namespace onyx::cpu {
void keep_onednn_gemm_setup_per_library() {}
}  // namespace onyx::cpu

#endif
