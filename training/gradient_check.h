// A whole model's gradients against central finite differences in float64: what `onyx
// gradcheck` runs before a user commits to a long training run. The model is converted to
// float64 (graph/float64.h); the loss is a fixed random projection of every float output,
// L = sum_k sum(out_k * R_k), so every output's gradient path is exercised; the analytic
// gradients come from the training graph autodiff builds, the numeric ones from the forward
// part of the same training graph (Dropout draws and BatchNormalization's batch statistics are
// then the same in both).
//
// Each parameter p (n elements) is checked along random directions d, d_i = +-max(1, |p_i|) /
// sqrt(n): the central difference (L(p + h d) - L(p - h d)) / 2h against the analytic
// directional derivative g . d. One pair of forward runs checks every element of p at once (an
// error e in the gradient shows as e . d, which vanishes only for e orthogonal to d), so a
// model with a hundred parameters and millions of weights is checked in two hundred forward
// passes. d has unit size so that no pre-activation moves further than one element's step
// would move it (ReLU kinks crossed by a larger step spoil the difference). Sampled single
// elements (the classic check, two forward passes per element) can be added to localise an
// error.
#pragma once

#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "inference/session.h"

namespace onyx {

struct GradCheckOptions {
  int elements_per_param = 0;  // sampled elements of each parameter (spread over it)
  int directions = 1;          // random directions per parameter
  double eps = 1e-6;           // step h: an element moves by h max(1, |x|) (/ sqrt(n): direction)
  double tolerance = 1e-4;     // largest relative error that passes
  uint64_t seed = 1;           // projection, directions, sampled elements, random ops
  int threads = 1;             // 0: one per core
};

struct ParamCheck {
  std::string name;
  Shape shape;
  int checked = 0;     // sampled elements
  int directions = 0;  // random directions
  /// Largest |analytic - numeric| over the checks.
  double max_abs_error = 0;
  /// The larger of: each direction's |g . d - numeric| / max(floor, |numeric|, |g * s|_2), with
  /// s_i = max(1, |p_i|) / sqrt(n) (|g * s|_2 is the typical size of g . d, so a direction
  /// nearly orthogonal to g by chance does not inflate the error), and the sampled elements'
  /// largest |analytic - numeric| / max(floor, their largest |numeric|); floor =
  /// 1e-4 max(1, |L|) stands for the round-off of the differences.
  double relative_error = 0;
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
