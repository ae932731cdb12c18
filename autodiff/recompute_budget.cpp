// Choosing what to recompute for a memory budget.
//
// Candidates without a pattern: the forward graph cut where the fewest activations cross. A
// boundary between two forward nodes (in the order they run) is crossed by each activation
// produced before it and read by a forward node after it; an activation is a value computed
// from the batch (not from weights or shapes alone: a causal mask built from Shape() is not
// one). In a residual network the boundaries after each residual Add are crossed by the
// residual stream alone, so the stretches between such cut points are the blocks (or half
// blocks) a user would mark by hand. Cut points are the boundaries crossed by the minimum
// number of activations (usually 1; a BERT attention mask read by every layer makes it 2).
// Neighbouring stretches merge while their activations stay within the largest stretch's,
// so the loss head's chain of small nodes does not become a dozen one-node segments.
//
// Choice: segments are tried largest saving first (the bytes of their values that the
// backward reads); one is kept when the planned peak, replayed over the graph with it
// recomputed, drops; this stops as soon as the peak fits.
#include <algorithm>
#include <fmt/format.h>
#include <numeric>

#include "autodiff/recompute_internal.h"
#include "graph/error.h"

namespace onyx::autodiff::recompute_detail {
namespace {

bool shape_only(const Node& n) {
  return canonical_domain(n.domain).empty() && (n.op_type == "Shape" || n.op_type == "Size");
}

/// Bytes of the segment's values that backward nodes read: what recomputing it can free.
int64_t saved_bytes(const Segment& s, const std::unordered_set<const Node*>& forward,
                    const ValueSizes& sizes) {
  int64_t total = 0;
  for (const Node* n : s.nodes)
    for (const Value* o : n->outputs) {
      if (!o) continue;
      bool read_back = std::any_of(o->consumers.begin(), o->consumers.end(), [&](auto& c) {
        return c.second >= 0 && !forward.count(c.first);
      });
      if (read_back) total += sizes.of(o);
    }
  return total;
}

std::string stretch_name(const std::vector<Node*>& nodes) {
  auto label = [](const Node* n) { return n->name.empty() ? n->op_type : n->name; };
  return nodes.size() == 1 ? label(nodes.front())
                           : fmt::format("{} .. {}", label(nodes.front()), label(nodes.back()));
}

}  // namespace

std::vector<Segment> cut_segments(const Graph& g, const std::unordered_set<const Node*>& forward,
                                  const ValueSizes& sizes) {
  std::vector<Node*> order;
  for (Node* n : g.topological_order())
    if (forward.count(n)) order.push_back(n);
  if (order.empty()) return {};
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
  // Activations: computed from a fed input, not through Shape/Size.
  std::unordered_set<const Value*> act;
  for (const Value* in : g.inputs)
    if (!g.is_initializer(in)) act.insert(in);
  // crossing[b]: activations live across the boundary after position b.
  std::vector<int64_t> delta(order.size() + 1, 0);
  std::vector<int64_t> made(order.size(), 0);  // activation bytes each node produces
  size_t first_act = order.size();
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* n = order[i];
    const bool from_batch =
        !shape_only(*n) && std::any_of(n->inputs.begin(), n->inputs.end(),
                                       [&](const Value* v) { return v && act.count(v); });
    if (!from_batch) continue;
    first_act = std::min(first_act, i);
    for (const Value* o : n->outputs) {
      if (!o) continue;
      act.insert(o);
      made[i] += sizes.of(o);
      size_t last = i;
      for (auto [c, idx] : o->consumers)
        if (auto it = pos.find(c); it != pos.end()) last = std::max(last, it->second);
      if (last > i) ++delta[i], --delta[last];
    }
  }
  std::vector<int64_t> crossing(order.size(), 0);
  int64_t running = 0;
  for (size_t b = 0; b < order.size(); ++b) crossing[b] = running += delta[b];
  int64_t fewest = INT64_MAX;
  for (size_t b = first_act; b + 1 < order.size(); ++b)
    if (crossing[b] > 0) fewest = std::min(fewest, crossing[b]);
  // Stretches between cut points (a cut is after its position).
  std::vector<std::vector<Node*>> stretches(1);
  std::vector<int64_t> weight(1, 0);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!never_recomputed(*order[i])) stretches.back().push_back(order[i]);
    weight.back() += made[i];
    if (i >= first_act && i + 1 < order.size() && crossing[i] == fewest) {
      stretches.emplace_back();
      weight.push_back(0);
    }
  }
  const int64_t largest = *std::max_element(weight.begin(), weight.end());
  std::vector<Segment> segments;
  int64_t current = 0;
  for (size_t k = 0; k < stretches.size(); ++k) {
    if (stretches[k].empty()) continue;
    if (!segments.empty() && current + weight[k] <= largest) {
      auto& nodes = segments.back().nodes;
      nodes.insert(nodes.end(), stretches[k].begin(), stretches[k].end());
      current += weight[k];
    } else {
      segments.push_back({"", stretches[k]});
      current = weight[k];
    }
  }
  for (Segment& s : segments) s.name = stretch_name(s.nodes);
  return segments;
}

RecomputeReport recompute_to_budget(Graph& g, const std::unordered_set<const Node*>& forward,
                                    const std::vector<Segment>& candidates, const ValueSizes& sizes,
                                    int64_t budget_bytes) {
  RecomputeReport r;
  r.budget_bytes = budget_bytes;
  r.candidates = candidates.size();
  r.planned_peak_before = r.planned_peak_after = planned_peak(g, sizes, nullptr);
  if (r.planned_peak_before <= budget_bytes) return r;
  std::vector<size_t> by_saving(candidates.size());
  std::iota(by_saving.begin(), by_saving.end(), size_t(0));
  std::vector<int64_t> saving(candidates.size());
  for (size_t k = 0; k < candidates.size(); ++k)
    saving[k] = saved_bytes(candidates[k], forward, sizes);
  std::stable_sort(by_saving.begin(), by_saving.end(),
                   [&](size_t a, size_t b) { return saving[a] > saving[b]; });
  // Segments must be applied in forward order (see apply_segments): keep the chosen set sorted.
  std::vector<bool> chosen(candidates.size(), false);
  auto in_order = [&](const std::vector<bool>& pick) {
    std::vector<const Segment*> out;
    for (size_t k = 0; k < candidates.size(); ++k)
      if (pick[k]) out.push_back(&candidates[k]);
    return out;
  };
  auto peak_with = [&](const std::vector<bool>& pick) {
    Applied a = apply_segments(g, forward, in_order(pick));
    int64_t p = planned_peak(g, sizes, &a);
    undo_segments(g, a);
    return p;
  };
  int64_t best = r.planned_peak_before;
  for (size_t k : by_saving) {
    if (best <= budget_bytes || saving[k] == 0) break;
    chosen[k] = true;
    int64_t p = peak_with(chosen);
    if (p < best) best = p;
    else chosen[k] = false;
  }
  if (best > budget_bytes) {
    const int64_t all =
        candidates.empty() ? best : peak_with(std::vector<bool>(candidates.size(), true));
    const size_t used = all < best ? candidates.size()
                                   : static_cast<size_t>(std::count(chosen.begin(), chosen.end(), true));
    ONYX_THROW("[recompute] a planned peak of activation memory within {} is out of reach: it is "
               "{} without recomputation and {} at the least (recomputing {} of {} candidate "
               "segments{}); raise the budget to at least that, or use a smaller batch",
               mib(budget_bytes), mib(r.planned_peak_before), mib(std::min(best, all)), used,
               candidates.size(), candidates.empty() ? ", and the forward graph has no cut point" : "");
  }
  Applied a = apply_segments(g, forward, in_order(chosen));
  r.planned_peak_after = planned_peak(g, sizes, &a);
  r.cloned_nodes = a.clones.size();
  for (const Segment* s : in_order(chosen)) {
    r.segments.push_back(s->name);
    ++r.chosen;
  }
  return r;
}

}  // namespace onyx::autodiff::recompute_detail
