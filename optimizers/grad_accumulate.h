// Gradient accumulation over micro-batches on flat float32 buffers: sum each micro-batch's
// gradients into one buffer, then scale once (e.g. by 1 / micro_batches) before clipping and
// the optimizer step.
#pragma once

#include <cstdint>

namespace onyx::optim {

/// acc += g over n floats, parallel and vectorised.
void accumulate_grads(float* acc, const float* g, int64_t n, int threads);
/// g *= scale over n floats, parallel and vectorised.
void scale_grads(float* g, int64_t n, double scale, int threads);

}  // namespace onyx::optim
