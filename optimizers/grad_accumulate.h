// Gradient accumulation over micro-batches on flat float32 buffers: sum each micro-batch's
// gradients into one buffer, then scale once (e.g. by 1 / micro_batches) before clipping and
// the optimizer step. On whichever device the buffers live (kernels/optimizer_kernels.h).
#pragma once

#include "graph/tensor.h"

namespace onyx::optim {

/// acc += g (float32 tensors of one element count), parallel and vectorised.
void accumulate_grads(Tensor& acc, const Tensor& g, int threads);
/// g *= scale (rounded to float32), parallel and vectorised.
void scale_grads(Tensor& g, double scale, int threads);

}  // namespace onyx::optim
