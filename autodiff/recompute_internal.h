// What recompute.cpp (applying segments) and recompute_budget.cpp (choosing them by memory)
// share. Not installed; autodiff-internal.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autodiff/memory_estimate.h"
#include "autodiff/recompute.h"

namespace onyx::autodiff::recompute_detail {

/// Forward nodes recomputed together, in forward order, with a name for reports.
struct Segment {
  std::string name;
  std::vector<Node*> nodes;
};

/// Random nodes and nodes with subgraphs: their outputs always stay checkpoints.
bool never_recomputed(const Node& n);

/// What apply_segments changed, so undo_segments can take it back.
struct Applied {
  std::vector<Node*> clones;
  std::vector<std::tuple<Node*, int, Value*>> redirected;  // (consumer, input, original value)
  std::unordered_map<const Value*, const Value*> original;  // clone value -> forward value
};

/// Recomputes `segments` (given in forward order): clones each one's nodes that the backward
/// reads and points the backward at the clones. The last segment's clones are appended first,
/// so the stable topological order runs each segment's clones just before its backward.
Applied apply_segments(Graph& g, const std::unordered_set<const Node*>& forward,
                       const std::vector<const Segment*>& segments);
/// Restores the graph apply_segments changed (node order included).
void undo_segments(Graph& g, const Applied& applied);

/// The segments by forward-node names (RecomputeSpec::pattern), in forward order.
std::vector<Segment> pattern_segments(const Graph& g,
                                      const std::unordered_set<const Node*>& forward,
                                      const std::string& pattern);
/// The stretches of the forward graph between its cut points (recompute_budget.cpp).
std::vector<Segment> cut_segments(const Graph& g, const std::unordered_set<const Node*>& forward,
                                  const ValueSizes& sizes);

/// Chooses among `candidates` the segments to recompute for the planned peak to fit
/// `spec.budget_bytes`, applies them to `g` and fills the report (recompute_budget.cpp).
RecomputeReport recompute_to_budget(Graph& g, const std::unordered_set<const Node*>& forward,
                                    const std::vector<Segment>& candidates, const ValueSizes& sizes,
                                    int64_t budget_bytes);

/// The planned peak of `g` with values sized by `sizes` (clones as their originals).
int64_t planned_peak(const Graph& g, const ValueSizes& sizes, const Applied* applied);

std::string mib(int64_t bytes);

}  // namespace onyx::autodiff::recompute_detail
