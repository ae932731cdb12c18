#include "autodiff/recompute.h"

#include <map>
#include <regex>
#include <set>
#include <vector>

#include "graph/error.h"

namespace onyx::autodiff {
namespace {

bool never_recomputed(const Node& n) {
  static const std::set<std::string> random = {"Dropout",           "RandomNormal",
                                               "RandomNormalLike",  "RandomUniform",
                                               "RandomUniformLike", "Bernoulli", "Multinomial"};
  if (random.count(n.op_type)) return true;
  for (const auto& [name, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

// Clones the nodes of `segment` that the backward reads (transitively within the segment),
// appended to `g`, and points the backward consumers at the clones. Returns the clone count.
size_t recompute_one(Graph& g, const std::vector<Node*>& segment,
                     const std::unordered_set<const Node*>& forward,
                     std::unordered_set<const Node*>& clones) {
  // Backward nodes proper: neither forward nor a clone of a later segment (a clone reading
  // this segment's output reads a checkpoint, which is kept, not recomputed).
  auto backward = [&](const Node* c) { return !forward.count(c) && !clones.count(c); };
  std::set<const Node*> in_segment(segment.begin(), segment.end());
  // Values of the segment that backward nodes read.
  std::vector<Value*> needed;
  for (Node* n : segment)
    for (Value* o : n->outputs) {
      if (!o) continue;
      for (auto [c, idx] : o->consumers)
        if (idx >= 0 && backward(c)) {
          needed.push_back(o);
          break;
        }
    }
  if (needed.empty()) return 0;
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
  size_t cloned = 0;
  for (Node* n : segment) {  // forward order
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
      }
      outs.push_back(c);
    }
    Node* c = g.add_node(n->op_type, ins, outs, n->domain, n->name + "/recompute");
    c->attrs = n->attrs;
    clones.insert(c);
    ++cloned;
  }
  for (Value* v : needed) {
    std::vector<std::pair<Node*, int>> uses(v->consumers.begin(), v->consumers.end());
    for (auto [c, idx] : uses)
      if (idx >= 0 && backward(c)) g.set_input(c, idx, clone_of.at(v));
  }
  return cloned;
}

}  // namespace

size_t recompute_segments(Graph& g, const std::unordered_set<const Node*>& forward,
                          const RecomputeSpec& spec) {
  if (spec.pattern.empty()) return 0;
  ONYX_CHECK(spec.every >= 1, "[recompute] every should be >= 1 but is {}", spec.every);
  std::regex re;
  try {
    re = std::regex(spec.pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    ONYX_THROW("[recompute] pattern '{}' is not a valid regular expression: {}", spec.pattern,
               e.what());
  }
  // Segments by matched text, in forward order of their first node.
  std::vector<std::string> keys;
  std::map<std::string, std::vector<Node*>> segments;
  size_t matched = 0;
  for (Node* n : g.topological_order()) {
    if (!forward.count(n)) continue;
    std::smatch m;
    if (!std::regex_search(n->name, m, re)) continue;
    ++matched;
    if (never_recomputed(*n)) continue;
    auto [it, fresh] = segments.try_emplace(m.str(0));
    if (fresh) keys.push_back(m.str(0));
    it->second.push_back(n);
  }
  ONYX_CHECK(matched > 0, "[recompute] pattern '{}' matches no forward node name", spec.pattern);
  // The last segment's backward runs first: its clones are appended first, so the stable
  // topological order runs each segment's clones just before that segment's backward.
  size_t cloned = 0;
  std::unordered_set<const Node*> clones;
  for (size_t k = keys.size(); k-- > 0;)
    if (k % static_cast<size_t>(spec.every) == 0)
      cloned += recompute_one(g, segments[keys[k]], forward, clones);
  return cloned;
}

}  // namespace onyx::autodiff
