#include "autodiff/recompute.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "autodiff/recompute_internal.h"
#include "graph/error.h"
#include "graph/specialize.h"

namespace onyx::autodiff {
namespace recompute_detail {

bool never_recomputed(const Node& n) {
  static const std::set<std::string> random = {"Dropout",           "RandomNormal",
                                               "RandomNormalLike",  "RandomUniform",
                                               "RandomUniformLike", "Bernoulli", "Multinomial"};
  if (random.count(n.op_type)) return true;
  for (const auto& [name, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

namespace {

std::regex compile_pattern(const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    ONYX_THROW("[recompute] pattern '{}' is not a valid regular expression: {}", pattern, e.what());
  }
}

// Clones the nodes of `segment` that the backward reads (transitively within the segment),
// appended to `g`, and points the backward consumers at the clones.
void recompute_one(Graph& g, const Segment& segment, const std::unordered_set<const Node*>& forward,
                   std::unordered_set<const Node*>& clones, Applied& applied) {
  // Backward nodes proper: neither forward nor a clone of a later segment (a clone reading
  // this segment's output reads a checkpoint, which is kept, not recomputed).
  auto backward = [&](const Node* c) { return !forward.count(c) && !clones.count(c); };
  std::set<const Node*> in_segment(segment.nodes.begin(), segment.nodes.end());
  // Values of the segment that backward nodes read.
  std::vector<Value*> needed;
  for (Node* n : segment.nodes)
    for (Value* o : n->outputs) {
      if (!o) continue;
      for (auto [c, idx] : o->consumers)
        if (idx >= 0 && backward(c)) {
          needed.push_back(o);
          break;
        }
    }
  if (needed.empty()) return;
  // The segment nodes those values need, walking back inside the segment.
  std::set<const Node*> wanted;
  std::vector<const Node*> stack;
  for (Value* v : needed) stack.push_back(v->producer);
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!n || !in_segment.count(n) || !wanted.insert(n).second) continue;
    for (Value* v : n->inputs)
      if (v && v->producer) stack.push_back(v->producer);
  }
  std::map<const Value*, Value*> clone_of;
  for (Node* n : segment.nodes) {  // forward order
    if (!wanted.count(n)) continue;
    std::vector<Value*> ins;
    for (Value* v : n->inputs) {
      auto it = v ? clone_of.find(v) : clone_of.end();
      ins.push_back(it != clone_of.end() ? it->second : v);
    }
    std::vector<Value*> outs;
    for (Value* o : n->outputs) {
      Value* c = o ? g.add_unique_value(o->name + "/recompute") : nullptr;
      if (c) {
        c->type = o->type;
        clone_of[o] = c;
        applied.original[c] = o;
      }
      outs.push_back(c);
    }
    Node* c = g.add_node(n->op_type, ins, outs, n->domain, n->name + "/recompute");
    c->attrs = n->attrs;
    clones.insert(c);
    applied.clones.push_back(c);
  }
  for (Value* v : needed) {
    std::vector<std::pair<Node*, int>> uses(v->consumers.begin(), v->consumers.end());
    for (auto [c, idx] : uses)
      if (idx >= 0 && backward(c)) {
        g.set_input(c, idx, clone_of.at(v));
        applied.redirected.emplace_back(c, idx, v);
      }
  }
}

}  // namespace

Applied apply_segments(Graph& g, const std::unordered_set<const Node*>& forward,
                       const std::vector<const Segment*>& segments) {
  Applied applied;
  std::unordered_set<const Node*> clones;
  for (size_t k = segments.size(); k-- > 0;)
    recompute_one(g, *segments[k], forward, clones, applied);
  return applied;
}

void undo_segments(Graph& g, const Applied& applied) {
  for (auto it = applied.redirected.rbegin(); it != applied.redirected.rend(); ++it)
    g.set_input(std::get<0>(*it), std::get<1>(*it), std::get<2>(*it));
  for (auto it = applied.clones.rbegin(); it != applied.clones.rend(); ++it) g.remove_node(*it);
  g.prune_values();
}

std::vector<Segment> pattern_segments(const Graph& g,
                                      const std::unordered_set<const Node*>& forward,
                                      const std::string& pattern) {
  const std::regex re = compile_pattern(pattern);
  // Segments by matched text, in forward order of their first node.
  std::vector<Segment> segments;
  std::map<std::string, size_t> index;
  size_t matched = 0;
  for (Node* n : g.topological_order()) {
    if (!forward.count(n)) continue;
    std::smatch m;
    if (!std::regex_search(n->name, m, re)) continue;
    ++matched;
    if (never_recomputed(*n)) continue;
    auto [it, fresh] = index.try_emplace(m.str(0), segments.size());
    if (fresh) segments.push_back({m.str(0), {}});
    segments[it->second].nodes.push_back(n);
  }
  ONYX_CHECK(matched > 0, "[recompute] pattern '{}' matches no forward node name", pattern);
  return segments;
}

int64_t planned_peak(const Graph& g, const ValueSizes& sizes, const Applied* applied) {
  return planned_peak_bytes(g, [&](const Value* v) {
    if (applied)
      if (auto it = applied->original.find(v); it != applied->original.end()) v = it->second;
    return sizes.of(v);
  });
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / 1048576.0);
}

}  // namespace recompute_detail

using namespace recompute_detail;

std::string RecomputeReport::summary() const {
  std::string s = fmt::format("recompute: {} of {} segments, {} nodes cloned", chosen, candidates,
                              cloned_nodes);
  if (planned_peak_before > 0)
    s += fmt::format("; planned peak activation memory {} -> {}", mib(planned_peak_before),
                     mib(planned_peak_after));
  if (budget_bytes > 0) s += fmt::format(" (budget {})", mib(budget_bytes));
  if (unknown_sizes > 0)
    s += fmt::format("; {} values of unknown size counted as 0", unknown_sizes);
  return s;
}

namespace {

/// Sizes for planning; onyx::Error when an input's shape is still not concrete.
ValueSizes sizes_for_planning(Model& m, const RecomputeSpec& spec) {
  const Graph& g = *m.graph;
  std::map<std::string, int64_t> bound = bind_input_dims(g, spec.input_shapes);
  for (const Value* in : g.inputs) {
    if (g.is_initializer(in) || spec.input_shapes.count(in->name) || !in->type.is_tensor())
      continue;
    bool concrete = in->type.shape.has_value();
    if (concrete)
      for (const Dim& d : *in->type.shape)
        concrete = concrete && (d.is_fixed() || (!d.param.empty() && bound.count(d.param)));
    ONYX_CHECK(concrete, "[recompute] planning memory needs concrete input shapes, but input "
               "'{}' is {} and RecomputeSpec::input_shapes does not size it (TrainingSession "
               "takes the shapes of the first batch)", in->name,
               in->type.shape ? sym_shape_str(*in->type.shape) : std::string("of unknown shape"));
  }
  return value_sizes(m, spec.input_shapes);
}

}  // namespace

void check_recompute_spec(const RecomputeSpec& spec) {
  ONYX_CHECK(spec.every >= 1, "[recompute] every should be >= 1 but is {}", spec.every);
  ONYX_CHECK(spec.budget_bytes >= 0, "[recompute] the budget should be >= 0 bytes but is {}",
             spec.budget_bytes);
  ONYX_CHECK(spec.budget_bytes == 0 || spec.every == 1, "[recompute] every ({}) takes every k-th "
             "segment of a pattern; with a memory budget the segments are chosen by size, so "
             "leave it at 1", spec.every);
  if (!spec.pattern.empty()) compile_pattern(spec.pattern);
}

RecomputeReport recompute_segments(Model& m, const std::unordered_set<const Node*>& forward,
                                   const RecomputeSpec& spec) {
  RecomputeReport report;
  check_recompute_spec(spec);
  if (spec.pattern.empty() && spec.budget_bytes == 0) return report;
  Graph& g = *m.graph;
  std::vector<Segment> segments;
  if (!spec.pattern.empty()) segments = pattern_segments(g, forward, spec.pattern);
  if (spec.budget_bytes > 0) {
    ValueSizes sizes = sizes_for_planning(m, spec);
    if (spec.pattern.empty()) segments = cut_segments(g, forward, sizes);
    report = recompute_to_budget(g, forward, segments, sizes, spec.budget_bytes);
    report.unknown_sizes = sizes.unknown;
    return report;
  }
  std::vector<const Segment*> chosen;
  for (size_t k = 0; k < segments.size(); k += static_cast<size_t>(spec.every))
    chosen.push_back(&segments[k]);
  report.candidates = segments.size();
  report.chosen = chosen.size();
  for (const Segment* s : chosen) report.segments.push_back(s->name);
  if (!spec.input_shapes.empty()) {
    ValueSizes sizes = sizes_for_planning(m, spec);
    report.unknown_sizes = sizes.unknown;
    report.planned_peak_before = planned_peak(g, sizes, nullptr);
    Applied applied = apply_segments(g, forward, chosen);
    report.planned_peak_after = planned_peak(g, sizes, &applied);
    report.cloned_nodes = applied.clones.size();
  } else {
    report.cloned_nodes = apply_segments(g, forward, chosen).clones.size();
  }
  return report;
}

}  // namespace onyx::autodiff
