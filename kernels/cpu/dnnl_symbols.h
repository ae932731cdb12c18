// oneDNN next to another copy of oneDNN in the same process (PyTorch's libtorch_cpu links one
// in): keeping each copy's one-time GEMM set-up its own.
#pragma once

namespace onyx::cpu {

/// Both copies export the same instantiation of std::call_once's trampoline
/// (std::once_flag::_Prepare_execution's lambda) for oneDNN's `gemm_info_t<...>::jit_init`. The
/// dynamic linker binds every library's use of such a symbol to the first definition in the
/// process's global scope, so where libtorch_cpu came first (a C++ program linking libtorch
/// before onyx), libdnnl's call_once ran libtorch's lambda: libtorch's GEMM kernels were
/// generated, libdnnl's never, and every oneDNN primitive built on its GEMM driver (all float
/// matmuls and several convolutions on AVX2 hosts, dnnl_sgemm everywhere) answered
/// dnnl_unimplemented when executed. This points each loaded library's reference to such a
/// trampoline back at its own definition (its global offset table entry, write-protected after
/// loading: unprotected for the write and protected again). Idempotent and cheap (one pass over
/// the relocations of the loaded libraries, only the first time); active_isa() runs it before
/// oneDNN's first use. Linux/glibc x86-64 only; elsewhere a no-op.
void keep_onednn_gemm_setup_per_library();

}  // namespace onyx::cpu
