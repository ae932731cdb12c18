// The plain interface between kernels/cuda/gather_scatter.cpp and gather_scatter.cu: Gather,
// GatherElements, ScatterElements and ScatterND on the device.
//
// Indices live on the device, so they are not checked on the host (that would need a copy
// and a synchronisation per run): an out-of-range index reads zeros (Gather,
// GatherElements) or is skipped (the scatters). Constant indices (initializers) are checked
// on the host when the kernel is built and run, with the CPU kernels' errors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace onyx::cuda::gs {

/// Element types the scatter reductions compute in (plain writes move bytes only).
enum class GsType : int { F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

enum class Reduction : int { None, Add, Mul, Max, Min };

inline constexpr int kMaxDims = 8;

/// y[o][j][k] = x[o][idx[j]][k] for o < outer, j < n, k < inner, x's gathered axis of size
/// `dim`; elements of elem_bytes (1..16) bytes. Negative indices count from the end.
void launch_gather(int elem_bytes, const void* x, const void* idx, bool idx64, void* y,
                   int64_t outer, int64_t n, int64_t dim, int64_t inner, cudaStream_t s);

/// Element-wise index math of GatherElements / ScatterElements: for element i of the indices
/// (row-major over ind_dims), the data element at the same coordinates except along `axis`,
/// where the index value (of axis_dim) is used; data_strides are the data's.
struct ElementsDesc {
  int rank = 0;
  int axis = 0;
  int64_t numel = 0;
  int64_t axis_dim = 0;
  int64_t ind_dims[kMaxDims] = {};
  int64_t data_strides[kMaxDims] = {};
};
void launch_gather_elements(int elem_bytes, const void* x, const void* idx, bool idx64, void* y,
                            const ElementsDesc& d, cudaStream_t s);
/// y (already a copy of the data) updated at the positions of idx with upd (same shape as
/// idx). Reduction None moves elem_bytes bytes (duplicate indices: one of the writes wins);
/// the others compute in `type` with atomics (so float sums may round in another order).
void launch_scatter_elements(GsType type, int elem_bytes, Reduction r, void* y, const void* idx,
                             bool idx64, const void* upd, const ElementsDesc& d, cudaStream_t s);

/// ScatterND: n_tuples int64 index tuples of k values each select slices of `slice` elements
/// of y (dims / strides of y's first k axes, strides in elements).
struct NdDesc {
  int k = 0;
  int64_t n_tuples = 0;
  int64_t slice = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};
void launch_scatter_nd(GsType type, int elem_bytes, Reduction r, void* y, const int64_t* idx,
                       const void* upd, const NdDesc& d, cudaStream_t s);

}  // namespace onyx::cuda::gs
