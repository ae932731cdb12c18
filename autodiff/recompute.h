// Activation recomputation (gradient checkpointing) on a training graph: the forward nodes of
// marked segments are cloned into the backward, where their clones recompute the activations
// the backward reads from the segment's inputs (the checkpoints). The originals then feed only
// the forward, so the planner frees their outputs as soon as the forward is past them: peak
// memory drops by the segment's activations for one extra forward pass of the segment.
#pragma once

#include <string>
#include <unordered_set>

#include "graph/ir.h"

namespace onyx::autodiff {

struct RecomputeSpec {
  /// Forward nodes whose names this regex finds (std::regex_search, ECMAScript) are
  /// recomputed; each distinct matched text is one segment, so "^/h\.\d+/" makes one segment
  /// per transformer block of a torch export. Empty: no recomputation.
  std::string pattern;
  /// Recompute only segments 0, k, 2k, ... (1: every segment).
  int every = 1;
};

/// Applies `spec` to training graph `g`, whose forward nodes (forward model and loss) are
/// `forward`; every other node is backward. Random nodes (Dropout, Random*, Bernoulli,
/// Multinomial) and nodes with subgraphs are never recomputed: their outputs stay
/// checkpoints, so gradients stay bit-identical. Returns the number of cloned nodes.
/// onyx::Error for an invalid pattern, every < 1, or a pattern that matches no node.
size_t recompute_segments(Graph& g, const std::unordered_set<const Node*>& forward,
                          const RecomputeSpec& spec);

}  // namespace onyx::autodiff
