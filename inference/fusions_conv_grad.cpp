// Training-graph fusion: the weight gradient the Conv gradient rule (autodiff/rules_nn.cpp,
// weight_grad) writes in plain ONNX,
//   Transpose(Slice(Conv(Transpose(X), Transpose(dY), strides=d, dilations=s, pads=p), 0, k))
// with every Transpose swapping axes 0 and 1, becomes one ai.onyx ConvWeightGrad(X, dY) with the
// forward convolution's kernel_shape k, strides s, dilations d and pads p, which runs on oneDNN's
// backward-weights primitive. A Cast to float32 after it (mixed precision) becomes its `to`.
// The training graph itself stays plain ONNX; only the executed copy is rewritten.
#include <climits>
#include <optional>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

using Ints = std::vector<int64_t>;

/// True when `n` is a Transpose swapping axes 0 and 1 of a rank nsp + 2 tensor.
bool swaps_batch_and_channels(const Node* n, size_t nsp) {
  if (!is_op(n, "Transpose") || !n->has_input(0)) return false;
  Ints perm = n->attr_ints("perm"), want{1, 0};
  for (int64_t i = 2; i < static_cast<int64_t>(nsp) + 2; ++i) want.push_back(i);
  return perm == want;
}

/// One matched pattern: the nodes it replaces and the new node's inputs and attributes.
struct Match {
  Node *conv, *slice, *last;  // last: the final Transpose, or the Cast absorbed after it
  Node* transpose;            // the final Transpose
  Value *x, *dy, *out;
  Ints k, strides, dilations, pads;
  bool to_float = false;
};

std::optional<Match> match(const Graph& g, Node* conv) {
  if (!is_op(conv, "Conv") || conv->num_inputs() != 2 || !conv->has_input(0) ||
      !conv->has_input(1) || conv->outputs.size() != 1 || !conv->outputs[0] ||
      conv->attr_int("group", 1) != 1 || conv->has_attr("kernel_shape") ||
      conv->attr_string("auto_pad", "NOTSET") != "NOTSET")
    return std::nullopt;
  Node *ta = conv->inputs[0]->producer, *tb = conv->inputs[1]->producer;
  if (!ta || !is_op(ta, "Transpose")) return std::nullopt;
  const Ints perm = ta->attr_ints("perm");
  if (perm.size() < 3) return std::nullopt;
  const size_t nsp = perm.size() - 2;
  if (!swaps_batch_and_channels(ta, nsp) || !swaps_batch_and_channels(tb, nsp)) return std::nullopt;
  Match m{.conv = conv, .x = ta->inputs[0], .dy = tb->inputs[0]};
  // Only float types the oneDNN kernel runs; float64 gradient checks keep their gemm path.
  const DataType dt = m.x->type.elem;
  if ((dt != DataType::Float && dt != DataType::Float16 && dt != DataType::BFloat16) ||
      m.dy->type.elem != dt)
    return std::nullopt;
  // The pattern's Conv strides over the taps (forward dilations) and dilates by the forward
  // strides.
  m.dilations = conv->attr_ints("strides", Ints(nsp, 1));
  m.strides = conv->attr_ints("dilations", Ints(nsp, 1));
  m.pads = conv->attr_ints("pads", Ints(2 * nsp, 0));
  if (m.strides.size() != nsp || m.dilations.size() != nsp || m.pads.size() != 2 * nsp)
    return std::nullopt;
  for (size_t i = 0; i < nsp; ++i)
    if (m.strides[i] < 1 || m.dilations[i] < 1 || m.pads[i] < 0 || m.pads[i + nsp] < 0)
      return std::nullopt;
  // Slice(r, starts = 0, ends = k, axes = [2, ..]) with unit steps, r read by it alone.
  m.slice = only_consumer(g, conv->outputs[0]);
  if (!is_op(m.slice, "Slice") || m.slice->inputs[0] != conv->outputs[0] ||
      m.slice->outputs.size() != 1 || !m.slice->outputs[0])
    return std::nullopt;
  auto slice_ints = [&](int i) {
    return constant_ints(g, m.slice->has_input(i) ? m.slice->inputs[i] : nullptr);
  };
  auto starts = slice_ints(1), ends = slice_ints(2), axes = slice_ints(3);
  Ints want_axes;
  for (int64_t i = 2; i < static_cast<int64_t>(nsp) + 2; ++i) want_axes.push_back(i);
  if (!starts || !ends || !axes || *starts != Ints(nsp, 0) || *axes != want_axes ||
      ends->size() != nsp)
    return std::nullopt;
  if (m.slice->has_input(4)) {
    auto steps = slice_ints(4);
    if (!steps || *steps != Ints(nsp, 1)) return std::nullopt;
  }
  for (int64_t e : *ends)
    if (e < 1) return std::nullopt;
  m.k = *ends;  // the kernel clips taps beyond the window's reach, as Slice does
  m.transpose = only_consumer(g, m.slice->outputs[0]);
  if (!swaps_batch_and_channels(m.transpose, nsp) || m.transpose->outputs.size() != 1 ||
      !m.transpose->outputs[0])
    return std::nullopt;
  m.last = m.transpose;
  m.out = m.transpose->outputs[0];
  // Mixed precision casts the 16-bit gradient to float32: computed in float32 instead.
  Node* cast = only_consumer(g, m.out);
  if (dt != DataType::Float && is_op(cast, "Cast") && cast->outputs.size() == 1 &&
      cast->outputs[0] && cast->attr_int("to", 0) == static_cast<int64_t>(DataType::Float)) {
    m.last = cast;
    m.out = cast->outputs[0];
    m.to_float = true;
  }
  return m;
}

}  // namespace

size_t fuse_conv_weight_grad(Model& model) {
  Graph& g = *model.graph;
  // Match first, rewrite after: a rewrite removes nodes later in the order.
  std::vector<Match> matches;
  for (Node* n : g.topological_order())
    if (auto m = match(g, n)) matches.push_back(*m);
  for (const Match& m : matches) {
    std::string name = m.conv->name + "_weight_grad";
    if (m.last != m.transpose) g.remove_node(m.last);
    for (Node* n : {m.transpose, m.slice, m.conv}) g.remove_node(n);
    Node* w = g.add_node("ConvWeightGrad", {m.x, m.dy}, {m.out}, "ai.onyx", name);
    w->attrs["kernel_shape"] = Attribute::of_ints("kernel_shape", m.k);
    w->attrs["strides"] = Attribute::of_ints("strides", m.strides);
    w->attrs["dilations"] = Attribute::of_ints("dilations", m.dilations);
    w->attrs["pads"] = Attribute::of_ints("pads", m.pads);
    w->attrs["group"] = Attribute::of_int("group", 1);
    if (m.to_float) w->attrs["to"] = Attribute::of_int("to", static_cast<int64_t>(DataType::Float));
  }
  if (!matches.empty()) import_domain(model, "ai.onyx");
  return matches.size();
}

}  // namespace onyx
