// The host-side checks and index math of the gather/scatter family (GatherElements,
// ScatterElements, GatherND, ScatterND) and their reduction attribute, shared by every provider:
// each refuses the same inputs with the same onyx::Error. Index *values* are checked where they
// are read (on the CPU while walking them; on a device from initializers at creation).
#pragma once

#include <vector>

#include "kernels/kernel.h"

namespace onyx {

/// ScatterElements / ScatterND `reduction` (add and mul since opset 16, max and min since 18).
enum class ScatterReduction { None, Add, Mul, Max, Min };
ScatterReduction parse_scatter_reduction(const KernelInfo& info);

/// GatherElements / ScatterElements: indices of data's rank, each dim within data's.
void check_element_indices(const KernelContext& ctx, const Tensor& x, const Tensor& ind);

/// ScatterElements: updates of the indices' shape and the data's dtype.
void check_element_updates(const KernelContext& ctx, const Tensor& x, const Tensor& ind,
                           const Tensor& upd);

/// GatherND / ScatterND: int64 indices of rank >= 1 whose tuples (the last dim, returned) fit
/// the dims of `shape` after `batch` leading ones.
size_t nd_tuple_length(const KernelContext& ctx, const Tensor& ind, const Shape& shape,
                       size_t batch);

/// ScatterND: updates of shape indices.shape[:-1] + data.shape[k:] and the data's dtype.
void check_nd_updates(const KernelContext& ctx, const Tensor& x, const Tensor& ind, size_t k,
                      const Tensor& upd);
/// The same for data of `shape` and `dtype` that is not a tensor yet (ai.onyx ScatterAddSum's
/// zeros).
void check_nd_updates(const KernelContext& ctx, const Shape& shape, DataType dtype,
                      const Tensor& ind, size_t k, const Tensor& upd);

/// GatherND / ScatterND index math: for each index tuple (the last dim of `ind`), the element
/// offset of the slice it selects in a tensor of `shape` (after `batch` leading dims, whose
/// offsets the caller adds). onyx::Error for a tuple entry outside [-dim, dim).
std::vector<int64_t> nd_offsets(const KernelContext& ctx, const Tensor& ind, const Shape& shape,
                                size_t batch);

}  // namespace onyx
