#include "kernels/denormals.h"

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define ONYX_HAS_MXCSR 1
#endif

namespace onyx {
namespace {

#ifdef ONYX_HAS_MXCSR
constexpr unsigned kFtzDaz = 0x8040;  // MXCSR bit 15 (flush to zero), bit 6 (denormals are zero)

// Per thread: how many scopes hold it, and its FTZ/DAZ bits before the outermost one.
thread_local int t_depth = 0;
thread_local unsigned t_saved = 0;

void enter() {
  if (t_depth++ == 0) {
    t_saved = _mm_getcsr() & kFtzDaz;
    _mm_setcsr(_mm_getcsr() | kFtzDaz);
  }
}

// A thread that never entered (another worker than the one the scope started on) is left
// alone.
void leave() {
  if (t_depth > 0 && --t_depth == 0) _mm_setcsr((_mm_getcsr() & ~kFtzDaz) | t_saved);
}

/// fn() on each worker of a team of `threads` (not on the calling thread: LLVM's OpenMP
/// runtime gives the master its own floating-point control back after a parallel region, so
/// the caller's mode is set outside one).
template <typename F>
void on_workers(int threads, F fn) {
  if (threads <= 1 || omp_in_parallel()) return;
#pragma omp parallel num_threads(threads)
  if (omp_get_thread_num() != 0) fn();
}
#endif

}  // namespace

FlushDenormals::FlushDenormals(bool on, int threads) : on_(on), threads_(threads) {
#ifdef ONYX_HAS_MXCSR
  if (!on_) return;
  // Workers first: a worker created now inherits the caller's mode, which must still be the
  // one to give back.
  on_workers(threads_, enter);
  enter();
#endif
}

FlushDenormals::~FlushDenormals() {
#ifdef ONYX_HAS_MXCSR
  if (!on_) return;
  on_workers(threads_, leave);
  leave();
#endif
}

bool FlushDenormals::active_here() {
#ifdef ONYX_HAS_MXCSR
  return (_mm_getcsr() & kFtzDaz) == kFtzDaz;
#else
  return false;
#endif
}

}  // namespace onyx
