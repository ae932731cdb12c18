// The plain interface between kernels/cuda/reduce.cpp (kernel classes, axes, shapes) and
// reduce.cu (device code) for Reduce* and ArgMax/ArgMin. The .cpp folds the input shape into
// a Geom (how input offsets follow from an output index and a reduced index); the .cu picks
// the kernel shape (threads along the reduced axis or along outputs, how many blocks share
// one output) and queues everything on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace onyx::cuda::red {

enum class DType : int { F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

enum class Op : int { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

/// The dtypes each Reduce op takes, as the CPU kernels do: float types and 32/64-bit integers;
/// Max and Min also int8, uint8 and bool.
constexpr bool reduce_supports(Op op, DType t) {
  const bool sum_type = t == DType::F32 || t == DType::F64 || t == DType::F16 ||
                        t == DType::BF16 || t == DType::I32 || t == DType::I64 ||
                        t == DType::U32 || t == DType::U64;
  if (op == Op::Max || op == Op::Min) return sum_type || t == DType::I8 || t == DType::U8 || t == DType::Bool;
  return sum_type;
}
/// ArgMax/ArgMin take every numeric dtype (not bool).
constexpr bool arg_supports(DType t) { return t != DType::Bool; }

/// Dims per side (kept, reduced) of the general layout, after merging neighbours.
inline constexpr int kMaxDims = 8;

/// How input offsets follow from (output o, reduced index r).
///   Rows:    [outer, red]          offset = o * red + r
///   Cols:    [outer, red, inner]   offset = (o / inner) * red * inner + o % inner + r * inner
///   General: o and r decomposed row-major over the kept and the reduced dims, each with its
///            input stride (any pattern of reduced axes).
enum class Layout : int { Rows, Cols, General };

struct Geom {
  int64_t out_numel = 1;  // outputs (> 0)
  int64_t red_numel = 1;  // elements reduced into each output (0: every output is the identity)
  Layout layout = Layout::Rows;
  int64_t inner = 1;  // Cols
  int nkept = 0, nred = 0;  // General
  int64_t kept_dims[kMaxDims] = {}, kept_strides[kMaxDims] = {};
  int64_t red_dims[kMaxDims] = {}, red_strides[kMaxDims] = {};
  /// General: the innermost input axis is reduced (consecutive r are mostly adjacent).
  bool innermost_reduced = false;
  /// Every input offset fits 31 bits (the general layout's index math then runs in 32 bits).
  bool small = true;
};

/// Device scratch launch_reduce needs for this call (0: pass nullptr).
size_t reduce_scratch_bytes(Op op, DType t, const Geom& g);

/// y[o] = op over the reduced elements of output o. x and y are device pointers of dtype t.
void launch_reduce(Op op, DType t, const void* x, void* y, const Geom& g, void* scratch,
                   cudaStream_t stream);

/// y (int64, [outer, inner]) = index along the middle axis of x ([outer, n, inner], n > 0) of
/// its maximum (is_max) or minimum: the first one, or the last with select_last. NaN counts as
/// the extreme, as on the CPU.
void launch_arg_reduce(bool is_max, bool select_last, DType t, const void* x, int64_t* y,
                       int64_t outer, int64_t n, int64_t inner, cudaStream_t stream);

}  // namespace onyx::cuda::red
