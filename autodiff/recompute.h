// Activation recomputation (gradient checkpointing) on a training graph: the forward nodes of
// marked segments are cloned into the backward, where their clones recompute the activations
// the backward reads from the segment's inputs (the checkpoints). The originals then feed only
// the forward, so the planner frees their outputs as soon as the forward is past them: peak
// memory drops by the segment's activations for one extra forward pass of the segment.
//
// Segments are marked by a regex over node names, or chosen to fit a memory budget: the
// candidates are then the regex's segments or, without a regex, the stretches of the forward
// graph between its cut points (where a single activation, such as a transformer's residual
// stream, carries everything later nodes read; see recompute_budget.cpp), and the largest are
// recomputed until the planned peak (autodiff/memory_estimate.h) fits.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "graph/ir.h"

namespace onyx::autodiff {

struct RecomputeSpec {
  /// Forward nodes whose names this regex finds (std::regex_search, ECMAScript) are
  /// recomputed; each distinct matched text is one segment, so "^/h\.\d+/" makes one segment
  /// per transformer block of a torch export. Empty: no recomputation (unless a budget is set).
  std::string pattern;
  /// Recompute only segments 0, k, 2k, ... (1: every segment). Pattern mode only.
  int every = 1;
  /// > 0: recompute as few segments as needed (largest saving first) for the training graph's
  /// planned peak activation bytes to fit this budget; onyx::Error naming the smallest peak
  /// reachable when even recomputing every candidate does not fit.
  int64_t budget_bytes = 0;
  /// Concrete shapes of graph inputs (model inputs, labels) that sizes are planned for; inputs
  /// not listed must have fixed shapes or symbols bound by the listed ones. TrainingSession
  /// fills it from the first batch when the model's shapes are symbolic.
  std::map<std::string, Shape> input_shapes;
};

/// What recompute_segments did.
struct RecomputeReport {
  int64_t budget_bytes = 0;
  size_t candidates = 0;    // segments considered
  size_t chosen = 0;        // segments recomputed
  size_t cloned_nodes = 0;  // forward nodes cloned into the backward
  /// Planned peak activation bytes without and with the recomputation; 0 when not estimated
  /// (pattern mode without input_shapes).
  int64_t planned_peak_before = 0, planned_peak_after = 0;
  size_t unknown_sizes = 0;  // values whose size the estimate could not tell (counted as 0)
  /// Name of each chosen segment: its matched text, or "first .. last" node of a cut segment.
  std::vector<std::string> segments;
  /// One line for logs: "recompute: 7 of 13 segments, 412 nodes cloned; planned peak ...".
  std::string summary() const;
};

/// The checks of `spec` that need no graph: every >= 1 (and 1 with a budget), budget >= 0, a
/// pattern that compiles. onyx::Error naming what is wrong.
void check_recompute_spec(const RecomputeSpec& spec);

/// Applies `spec` to training model `m`, whose forward nodes (forward model and loss) are
/// `forward`; every other node is backward. Random nodes (Dropout, Random*, Bernoulli,
/// Multinomial) and nodes with subgraphs are never recomputed: their outputs stay
/// checkpoints, so gradients stay bit-identical. onyx::Error for an invalid pattern, every < 1,
/// a pattern that matches no node, a budget without concrete shapes, or a budget that cannot be
/// met.
RecomputeReport recompute_segments(Model& m, const std::unordered_set<const Node*>& forward,
                                   const RecomputeSpec& spec);

}  // namespace onyx::autodiff
