#include "graph/sequence_lowering.h"

#include <limits>
#include <optional>

#include "graph/shape_inference.h"

namespace onyx {
namespace {

/// Where piece `k` of a SplitToSequence lies along its axis: [begin, end), and whether the
/// axis is squeezed away (no split input and keepdims = 0).
struct Piece {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive; int64 max for "to the end"
};

/// What a SplitToSequence's split says, once: its piece sizes, or one size for all.
struct SplitPlan {
  std::optional<std::vector<int64_t>> sizes;  // 1-D split
  int64_t chunk = 1;                          // scalar split, or 1 without split
  std::optional<int64_t> count;               // number of pieces, when known
  bool squeeze = false;

  std::optional<Piece> piece(int64_t k) const {
    if (k < 0) {
      if (!count) return std::nullopt;
      k += *count;
    }
    if (k < 0 || (count && k >= *count)) return std::nullopt;
    if (sizes) {
      int64_t b = 0;
      for (int64_t i = 0; i < k; ++i) b += (*sizes)[static_cast<size_t>(i)];
      return Piece{b, b + (*sizes)[static_cast<size_t>(k)]};
    }
    // The last piece of a scalar split may be shorter: Slice clamps the end.
    return Piece{k * chunk, k * chunk + chunk};
  }
};

std::optional<SplitPlan> plan_for(const Graph& g, const Node& split) {
  const Value* x = split.inputs[0];
  if (!x->type.is_tensor() || !x->type.shape) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(x->type.shape->size());
  int64_t axis = split.attr_int("axis", 0);
  if (axis < -rank || axis >= rank) return std::nullopt;
  if (axis < 0) axis += rank;
  const Dim& d = (*x->type.shape)[static_cast<size_t>(axis)];
  std::optional<int64_t> dim = d.is_fixed() ? std::optional<int64_t>(d.value) : std::nullopt;
  SplitPlan p;
  if (!split.has_input(1)) {
    p.squeeze = split.attr_int("keepdims", 1) == 0;
    p.count = dim;
    return p;
  }
  const Value* s = split.inputs[1];
  auto vals = known_int_values(g, s);
  if (!vals || !s->type.is_tensor() || !s->type.shape) return std::nullopt;
  if (s->type.shape->empty()) {
    if (vals->size() != 1 || (*vals)[0] <= 0) return std::nullopt;
    p.chunk = (*vals)[0];
    if (dim) p.count = (*dim + p.chunk - 1) / p.chunk;
    return p;
  }
  for (int64_t v : *vals)
    if (v < 0) return std::nullopt;
  p.sizes = *vals;
  p.count = static_cast<int64_t>(vals->size());
  return p;
}

Value* int64_initializer(Graph& g, const std::string& hint, std::vector<int64_t> v, bool scalar) {
  Value* c = g.add_unique_value(hint);
  g.add_initializer(c->name, scalar ? Tensor::scalar<int64_t>(v.at(0))
                                    : Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  return c;
}

bool lower(Graph& g, Node* split) {
  if (!split->has_input(0) || split->outputs.size() != 1) return false;
  Value* seq = split->outputs[0];
  for (const Value* o : g.outputs)
    if (o == seq) return false;
  auto plan = plan_for(g, *split);
  if (!plan) return false;
  const int64_t rank = static_cast<int64_t>(split->inputs[0]->type.shape->size());
  int64_t axis = split->attr_int("axis", 0);
  if (axis < 0) axis += rank;

  // Every reader first: a sequence lowered only in part would still need its node.
  struct Read {
    Node* node;
    std::optional<Piece> piece;  // nullopt for SequenceLength
    int64_t k = 0;
  };
  std::vector<Read> reads;
  for (const auto& [c, idx] : seq->consumers) {
    if (idx != 0 || c->outputs.size() != 1) return false;
    if (c->op_type == "SequenceLength" && c->domain.empty()) {
      if (!plan->count) return false;
      reads.push_back({c, std::nullopt});
      continue;
    }
    if (c->op_type != "SequenceAt" || !c->domain.empty() || !c->has_input(1)) return false;
    auto pos = known_int_values(g, c->inputs[1]);
    if (!pos || pos->size() != 1) return false;
    auto piece = plan->piece((*pos)[0]);
    if (!piece) return false;
    reads.push_back({c, piece, (*pos)[0] < 0 && plan->count ? (*pos)[0] + *plan->count : (*pos)[0]});
  }

  Value* x = split->inputs[0];
  const std::string base = split->name.empty() ? "split_to_sequence" : split->name;
  for (const Read& r : reads) {
    Value* out = r.node->outputs[0];
    const std::string name = r.node->name;
    g.remove_node(r.node);
    if (!r.piece) {
      Value* n = int64_initializer(g, base + "_count", {*plan->count}, true);
      g.replace_all_uses(out, n);
      continue;
    }
    if (plan->squeeze) {
      Value* k = int64_initializer(g, base + "_index", {r.k}, true);
      Node* gather = g.add_node("Gather", {x, k}, {out}, "", name);
      gather->attrs["axis"] = Attribute::of_int("axis", axis);
      continue;
    }
    Value* starts = int64_initializer(g, base + "_starts", {r.piece->begin}, false);
    Value* ends = int64_initializer(g, base + "_ends", {r.piece->end}, false);
    Value* axes = int64_initializer(g, base + "_axes", {axis}, false);
    g.add_node("Slice", {x, starts, ends, axes}, {out}, "", name);
  }
  g.remove_node(split);
  return true;
}

}  // namespace

int lower_indexed_sequences(Graph& g) {
  std::vector<Node*> splits;
  for (const auto& n : g.nodes())
    if (n->op_type == "SplitToSequence" && n->domain.empty()) splits.push_back(n.get());
  int lowered = 0;
  for (Node* s : splits) lowered += lower(g, s) ? 1 : 0;
  if (lowered) {
    g.sort_topologically();
    g.prune_values();
  }
  return lowered;
}

}  // namespace onyx
