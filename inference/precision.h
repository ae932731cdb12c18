// Mixed precision for sessions: autocast (graph/autocast.h) told which ops the providers of
// this build can run in the low format, so an op without such a kernel stays in float32
// instead of failing at session creation.
#pragma once

#include "graph/autocast.h"

namespace onyx {

/// AutocastOptions whose `supports` asks the CPU kernel registry (every session's fallback)
/// for the node's op at `model`'s opset with the low dtype. `model` must outlive the options.
AutocastOptions provider_autocast_options(const Model& model);

/// Types `model`'s values (infer_types_and_shapes) and autocasts it for `p` with the
/// providers' kernels; a no-op for Precision::Float32.
AutocastReport autocast_for_providers(Model& model, Precision p);

}  // namespace onyx
