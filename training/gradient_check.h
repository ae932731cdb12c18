// A whole model's gradients against central finite differences in float64: what `onyx
// gradcheck` runs before a user commits to a long training run. The model is converted to
// float64 (graph/float64.h); the loss is a fixed random projection of every float output,
// L = sum_k sum(out_k * R_k), so every output's gradient path is exercised; the analytic
// gradients come from the training graph autodiff builds, the numeric ones from the same
// training graph's loss with one parameter element nudged by +-h (Dropout draws and
// BatchNormalization's batch statistics are then the same in both).
#pragma once

#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "inference/session.h"

namespace onyx {

struct GradCheckOptions {
  int elements_per_param = 4;  // sampled elements of each parameter (spread over it)
  double eps = 1e-6;           // step h = eps * max(1, |x|)
  double tolerance = 1e-4;     // largest relative error that passes
  uint64_t seed = 1;           // projection, sampled elements, random ops
  int threads = 1;
};

struct ParamCheck {
  std::string name;
  Shape shape;
  int checked = 0;
  double max_abs_error = 0;   // max |analytic - numeric| over the sampled elements
  double relative_error = 0;  // max_abs_error / max(1e-4 max(1, |L|), max |numeric|)
};

struct GradCheckReport {
  std::vector<ParamCheck> params;  // every float initializer that reaches an output
  double tolerance = 0;
  bool passed() const;
  const ParamCheck* worst() const;
};

/// Checks `forward`'s gradients on `feeds` (float feeds are converted to float64). Throws
/// onyx::Error when a node has no gradient rule (see autodiff::missing_gradients, which
/// lists them all) or when no float output depends on a parameter.
GradCheckReport check_model_gradients(const Model& forward, const NamedTensors& feeds,
                                      const GradCheckOptions& options = {});

}  // namespace onyx
