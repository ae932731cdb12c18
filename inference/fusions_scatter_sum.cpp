// fuse_scatter_add_sum: training differentiates Gather / GatherND (autodiff/rules_shape.cpp) as
//   ScatterND(zeros_like(x), indices, dy, reduction=add)
// and sums a value's gradients with Sum, so a tied embedding gets Sum(dW_head, ScatterND(...))
// and torch's packed q/k/v (three Gathers of one [3, ...] tensor) a Sum of three ScatterNDs:
// whole tensors of zeros copied, scattered into and added up. -> ai.onyx ScatterAddSum(terms...,
// shape) (the CPU provider's scatter_add_sum.cpp), which touches only the named rows; the
// same bits. A ScatterND into zeros that no Sum reads alone becomes a one-term ScatterAddSum.
#include <algorithm>
#include <optional>
#include <unordered_set>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

struct ScatterTerm {
  Value* indices;
  Value* updates;
  Value* shape;  // the zeros' Expand shape; nullptr when they were folded
  Shape dims;    // the folded zeros' dims
};

/// `v` as ScatterND(zeros, indices, updates, reduction=add) of a float type, else nullopt.
std::optional<ScatterTerm> scatter_into_zeros(const Graph& g, const Value* v) {
  const Node* n = made_by(v, "ScatterND");
  if (!n || n->inputs.size() != 3 || n->outputs.size() != 1 || !n->inputs[1] || !n->inputs[2] ||
      n->attr_string("reduction", "none") != "add")
    return std::nullopt;
  const DataType dt = v->type.elem;
  if (dt != DataType::Float && dt != DataType::Double) return std::nullopt;
  const std::optional<ZeroFill> zeros = zero_fill(g, n->inputs[0]);
  if (!zeros || n->inputs[1]->type.elem != DataType::Int64 || n->inputs[2]->type.elem != dt ||
      n->inputs[0]->type.elem != dt)
    return std::nullopt;
  // Expand broadcasts its fill against the shape: the shape alone is the output's when it has
  // the output's (known, non-zero) rank, the fill being a single value.
  if (zeros->shape) {
    const ValueType &vt = v->type, &st = zeros->shape->type;
    if (!vt.is_tensor() || !vt.shape || vt.shape->empty() || !st.is_tensor() || !st.shape ||
        st.shape->size() != 1 || (*st.shape)[0] != Dim::fixed(static_cast<int64_t>(vt.shape->size())))
      return std::nullopt;
  }
  return ScatterTerm{n->inputs[1], n->inputs[2], zeros->shape, zeros->dims};
}

struct SumMatch {
  Value* out;                        // the Sum's (or lone ScatterND's) output
  std::vector<int64_t> kinds;        // 0 dense, 1 scattered
  std::vector<Value*> inputs;        // the terms' inputs, in order
  std::optional<ScatterTerm> first;  // a scattered term (its zeros give the output's shape)
  std::vector<const Node*> scatters;  // the ScatterNDs it takes
};

/// A Sum with at least one ScatterND-into-zeros term read by it alone; every term of the Sum's
/// own shape (no broadcasting).
std::optional<SumMatch> match_sum(const Graph& g, Node* sum) {
  if (!is_op(sum, "Sum") || sum->outputs.size() != 1 || sum->inputs.empty()) return std::nullopt;
  Value* out = sum->outputs[0];
  SumMatch m{out, {}, {}, std::nullopt, {}};
  for (Value* in : sum->inputs) {
    if (!in || !provably_same_shape(in, out) || in->type.elem != out->type.elem) return std::nullopt;
    const bool once = std::count(sum->inputs.begin(), sum->inputs.end(), in) == 1;
    std::optional<ScatterTerm> t = once && only_consumer(g, in) == sum ? scatter_into_zeros(g, in)
                                                                       : std::nullopt;
    if (!t) {
      m.kinds.push_back(0);
      m.inputs.push_back(in);
      continue;
    }
    m.kinds.push_back(1);
    m.inputs.push_back(t->updates);
    m.inputs.push_back(t->indices);
    m.scatters.push_back(in->producer);
    if (!m.first) m.first = t;
  }
  if (!m.first) return std::nullopt;
  return m;
}

/// A ScatterND into zeros (that no Sum match took): a one-term sum.
std::optional<SumMatch> match_lone_scatter(const Graph& g, Node* n) {
  if (!is_op(n, "ScatterND") || n->outputs.size() != 1) return std::nullopt;
  Value* out = n->outputs[0];
  std::optional<ScatterTerm> t = scatter_into_zeros(g, out);
  if (!t) return std::nullopt;
  return SumMatch{out, {1}, {t->updates, t->indices}, t, {n}};
}

}  // namespace

size_t fuse_scatter_add_sum(Model& model, const ExecutionProvider& runs_it) {
  Graph& g = *model.graph;
  std::vector<SumMatch> matches;
  std::unordered_set<const Node*> taken;  // ScatterNDs a match holds
  // Sums first, then the ScatterNDs none of them took. Only for a provider with the kernel:
  // elsewhere the plain nodes stay where they run.
  for (auto* match : {&match_sum, &match_lone_scatter})
    for (const auto& n : g.nodes()) {
      if (taken.count(n.get())) continue;
      std::optional<SumMatch> m = (*match)(g, n.get());
      if (!m || !runs_it.registry().find("ScatterAddSum", "ai.onyx", 1, runs_it.name(),
                                         m->out->type.elem))
        continue;
      taken.insert(m->scatters.begin(), m->scatters.end());
      matches.push_back(std::move(*m));
    }
  for (SumMatch& m : matches) {
    Value* shape = m.first->shape;
    if (!shape) {
      shape = g.add_unique_value(m.out->name + "_shape");
      const Shape& d = m.first->dims;
      g.add_initializer(shape->name,
                        Tensor::from_vector<int64_t>({static_cast<int64_t>(d.size())}, d));
    }
    std::vector<Value*> inputs = m.inputs;
    inputs.push_back(shape);
    Node* old = m.out->producer;
    detach_output(g, old, 0);
    Node* fused =
        g.add_node("ScatterAddSum", std::move(inputs), {m.out}, "ai.onyx", old->name + "_fused");
    fused->attrs["terms"] = Attribute::of_ints("terms", m.kinds);
    import_domain(model, "ai.onyx");
  }
  return matches.size();
}

}  // namespace onyx
