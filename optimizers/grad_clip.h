// Gradient checks and clipping over a flat float32 buffer (PyTorch's clip_grad_norm_ with
// norm_type 2), on whichever device the buffer lives (kernels/optimizer_kernels.h). Reductions
// use fixed-size blocks summed in order, so results do not depend on the thread count.
#pragma once

#include "graph/tensor.h"

namespace onyx::optim {

/// sqrt(sum g^2) over the float32 tensor g, parallel and vectorised, accumulated in double.
double global_norm(const Tensor& g, int threads);
/// Scales g so its global norm is at most max_norm; returns the norm before clipping.
/// As PyTorch: g *= max_norm / (norm + 1e-6) when that factor is below 1. max_norm <= 0: no
/// clipping. A non-finite norm leaves g unchanged (callers skip the step; see has_non_finite).
double clip_by_global_norm(Tensor& g, double max_norm, int threads);
/// True when any element is NaN or infinite.
bool has_non_finite(const Tensor& g, int threads);
/// Copies src into dst (same element count) and returns their sum of squares (double, fixed
/// blocks, so independent of the thread count): one read of a gradient where the check for
/// NaN/inf (the sum is finite exactly when every value is), the copy into the flat buffer and
/// the global norm would read it three times. src may be dst itself (a gradient the graph
/// computed into the buffer): then only the sum is taken.
double copy_sum_squares(Tensor& dst, const Tensor& src, int threads);
/// Clips g whose global norm `norm` is already known, as clip_by_global_norm does.
void clip_to_norm(Tensor& g, double norm, double max_norm, int threads);

}  // namespace onyx::optim
