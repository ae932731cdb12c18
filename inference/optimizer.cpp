#include "inference/optimizer.h"

#include <spdlog/spdlog.h>

#include <climits>
#include <unordered_set>

#include "inference/executor.h"
#include "graph/shape_inference.h"
#include "inference/fusion_util.h"

namespace onyx {
namespace {

// Ops never folded: random or stateful, or holding subgraphs.
bool foldable_op(const Node& n) {
  static const std::unordered_set<std::string> never = {
      "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
      "Bernoulli", "Dropout", "If", "Loop", "Scan", "SequenceMap", "Optional"};
  if (!n.domain.empty() || never.count(n.op_type)) return false;
  for (const auto& [an, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return false;
  return true;
}

// Folded results above this size stay computed at run time rather than bloating the model.
constexpr size_t kMaxFoldedBytes = size_t(64) << 20;

bool shape_fully_known(const Value* v, Shape* out) {
  if (!v || !v->type.is_tensor() || !v->type.shape) return false;
  out->clear();
  for (const Dim& d : *v->type.shape) {
    if (!d.is_fixed()) return false;
    out->push_back(d.value);
  }
  return true;
}

/// True when some output of `node` is known, from its inferred type, to exceed the fold limit:
/// such a node is not evaluated at all (GPT-2-small's tied LM head, a Transpose of its 154 MB
/// embedding, cost 120-180 ms and 38,000 page faults of session creation to be thrown away).
bool known_too_large_to_fold(const Node& node) {
  for (const Value* v : node.outputs) {
    Shape s;
    if (!v || !shape_fully_known(v, &s) || !dtype_is_known(static_cast<int32_t>(v->type.elem)))
      continue;
    const std::optional<size_t> bytes = checked_nbytes(v->type.elem, s);  // nullopt: overflow
    if (!bytes || *bytes > kMaxFoldedBytes) return true;
  }
  return false;
}

/// True when `node` is a Transpose of the last two axes read only by MatMuls, which
/// fuse_transpose_into_matmul turns into FusedMatMul reading the operand transposed in place:
/// folding it would make a transposed copy of the weight, a second one when the weight has other
/// readers (a tied embedding's Gather).
bool matmuls_read_it_in_place(const Graph& g, const Node& node) {
  if (!swaps_last_two_axes(node) || !node.outputs[0] || is_graph_output(g, node.outputs[0]) ||
      node.outputs[0]->consumers.empty())
    return false;
  for (const auto& [c, input] : node.outputs[0]->consumers)
    if (!is_op(c, "MatMul") || c->num_inputs() != 2) return false;
  return true;
}


/// True when `node` is Expand(a constant single value, shape) read only as the data of
/// ScatterND / ScatterElements: training's zeros_like under a Gather's or MaxPool's gradient.
/// Folded, it becomes a constant as large as the scattered tensor (32 MB for a 16384 x 512
/// embedding) that every run copies before scattering; left alone, the Expand is a write-only fill
/// and the gradient fusions (fuse_scatter_add_sum, fuse_max_pool_grad) take it without reading
/// the zeros.
bool scatter_zeros_filled_at_run_time(const Graph& g, const Node& node) {
  if (!is_op(&node, "Expand") || node.num_inputs() != 2 || !node.outputs[0] ||
      is_graph_output(g, node.outputs[0]) || node.outputs[0]->consumers.empty())
    return false;
  const Tensor* fill = constant_value(g, node.inputs[0]);
  if (!fill || fill->numel() != 1) return false;
  for (const auto& [c, input] : node.outputs[0]->consumers)
    if (input != 0 || !(is_op(c, "ScatterND") || is_op(c, "ScatterElements"))) return false;
  return true;
}

/// Replaces `node` by an initializer when its one output is a small integer tensor (rank 0 or
/// 1, int64 or int32) whose contents shape inference's data propagation knows although some
/// input is not constant: a fixed dim of a partly symbolic shape. torch.onnx computes the
/// attention scale from the head size as Shape -> Slice -> Cast -> Sqrt -> Div on a
/// `[batch, heads, seq, 64]` value; once the Slice is 64, the float steps fold as constants and
/// the scale reaches the product as a constant (fuse_scale_into_matmul).
bool fold_known_shape_value(Graph& g, Node* node) {
  if (node->outputs.size() != 1 || !node->outputs[0]) return false;
  Value* out = node->outputs[0];
  const DataType dt = out->type.elem;
  if (!out->type.is_tensor() || (dt != DataType::Int64 && dt != DataType::Int32) ||
      !out->type.shape || out->type.shape->size() > 1)
    return false;
  const bool scalar = out->type.shape->empty();
  if (!scalar && !(*out->type.shape)[0].is_fixed()) return false;
  const std::optional<std::vector<int64_t>> vals = known_int_values(g, out);
  if (!vals || (scalar ? vals->size() != 1
                       : static_cast<int64_t>(vals->size()) != (*out->type.shape)[0].value))
    return false;
  const Shape shape = scalar ? Shape{} : Shape{static_cast<int64_t>(vals->size())};
  Tensor t = Tensor::from_vector<int64_t>(shape, *vals);
  if (dt == DataType::Int32) {
    for (int64_t v : *vals)
      if (v < INT32_MIN || v > INT32_MAX) return false;
    std::vector<int32_t> narrow(vals->begin(), vals->end());
    t = Tensor::from_vector<int32_t>(shape, narrow);
  }
  g.remove_node(node);
  g.add_initializer(out->name, std::move(t));
  return true;
}

}  // namespace

size_t fold_constants(Model& model, const ExecutionProvider& cpu, bool transposes_fused_later) {
  Graph& g = *model.graph;
  size_t folded = 0;
  for (Node* node : g.topological_order()) {
    if (!foldable_op(*node) || node->outputs.empty() || known_too_large_to_fold(*node)) continue;
    if (transposes_fused_later && matmuls_read_it_in_place(g, *node)) continue;
    if (scatter_zeros_filled_at_run_time(g, *node)) continue;
    std::vector<Datum> inputs;
    bool all_const = true;
    for (const Value* v : node->inputs) {
      if (!v) {
        inputs.emplace_back();
        continue;
      }
      // Initializers a feed may replace (IR < 4 inputs, or graph inputs with a default) are
      // not constants.
      const Tensor* t = constant_value(g, v);
      if (!t) {
        all_const = false;
        break;
      }
      inputs.emplace_back(*t);
    }
    // Shape of a value whose shape is statically known folds even though it is not constant.
    Shape known;
    if (!all_const && node->op_type == "Shape" && !node->has_attr("start") && !node->has_attr("end") &&
        shape_fully_known(node->inputs[0], &known)) {
      Value* out = node->outputs[0];
      g.remove_node(node);
      g.add_initializer(out->name, Tensor::from_vector<int64_t>({static_cast<int64_t>(known.size())}, known));
      ++folded;
      continue;
    }
    if (!all_const) {
      folded += fold_known_shape_value(g, node);
      continue;
    }
    std::vector<Datum> outs;
    try {
      outs = evaluate_node(*node, model, g, cpu, inputs);
    } catch (const Error& e) {
      // Leave the node to fail (or succeed) at run time with full context.
      spdlog::debug("constant folding skipped {}: {}", node->label(), e.what());
      continue;
    }
    bool ok = true;
    for (size_t o = 0; o < outs.size(); ++o)
      ok &= !node->outputs[o] || (outs[o].is_tensor() && outs[o].tensor.nbytes() <= kMaxFoldedBytes);
    if (!ok) continue;
    std::vector<Value*> outputs = node->outputs;
    g.remove_node(node);
    for (size_t o = 0; o < outputs.size(); ++o)
      if (outputs[o]) g.add_initializer(outputs[o]->name, outs[o].tensor.clone());
    ++folded;
  }
  return folded;
}

size_t drop_zero_ratio_dropouts(Graph& g) {
  size_t dropped = 0;
  for (const auto& n : g.nodes()) {
    Node* d = n.get();
    if (!is_op(d, "Dropout") || !d->has_input(0) || !d->has_input(1) || d->outputs.empty() ||
        !d->outputs[0])
      continue;
    const Tensor* ratio = constant_value(g, d->inputs[1]);
    if (!ratio || ratio->numel() != 1 || ratio->to_double_vector()[0] != 0.0) continue;
    const Value* mask = d->outputs.size() > 1 ? d->outputs[1] : nullptr;
    if (mask && (!mask->consumers.empty() || is_graph_output(g, mask))) continue;
    // Inputs past the first lose this reader, and the (unread) mask its producer.
    while (d->num_inputs() > 1) {
      g.set_input(d, d->num_inputs() - 1, nullptr);
      d->inputs.pop_back();
    }
    if (d->outputs.size() > 1) {
      if (Value* m = d->outputs[1]) {
        m->producer = nullptr;
        m->producer_output = -1;
      }
      d->outputs.erase(d->outputs.begin() + 1, d->outputs.end());
    }
    d->op_type = "Identity";
    ++dropped;
  }
  return dropped;
}

size_t eliminate_dead_code(Graph& g) {
  std::unordered_set<const Value*> outputs(g.outputs.begin(), g.outputs.end());
  size_t removed = 0;
  auto order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    bool used = false;
    for (const Value* v : n->outputs) used |= v && (!v->consumers.empty() || outputs.count(v));
    if (!used) {
      g.remove_node(n);
      ++removed;
    }
  }
  std::vector<std::string> dead;
  for (const auto& [name, t] : g.initializers) {
    const Value* v = g.find_value(name);
    if (!v || (v->consumers.empty() && !outputs.count(v))) dead.push_back(name);
  }
  for (const auto& name : dead) {
    g.initializers.erase(name);
    auto& o = g.overridable_initializers;
    o.erase(std::remove(o.begin(), o.end(), name), o.end());
  }
  g.prune_values();
  return removed;
}

size_t optimize_graph(Model& model, OptLevel level, const ExecutionProvider& cpu,
                      const ExecutionProvider& first, const LayoutPreferences& layout,
                      bool approximate_fusions) {
  if (level == OptLevel::None) return 0;
  size_t before = model.graph->num_nodes();
  const bool transposes_fused_later = level >= OptLevel::Extended;
  size_t fused = 0;
  // Before folding, which would dequantize the int8 weights into float ones.
  if (level >= OptLevel::Extended && layout.exact_int8_convolutions)
    fused += fuse_qdq_into_qlinear_conv(model);
  size_t folded = fold_constants(model, cpu, transposes_fused_later);
  fused += drop_zero_ratio_dropouts(*model.graph);
  if (level >= OptLevel::Extended) {
    fused += fuse_conv_weight_grad(model);
    fused += fuse_gelu(model, approximate_fusions) + fuse_gelu_grad(model);
    fused += fuse_relu_grad(model, first) + fuse_layer_norm_grad(model, first) +
             fuse_max_pool_grad(model, first);
    // Before fuse_transpose_into_matmul and fuse_scale_into_matmul take its Transposes and scale.
    fused += fuse_softmax_attention_grad(model, first);
    if (size_t loss_grads = fuse_softmax_cross_entropy_grad(model, first)) {
      // The spelling it replaced still reads log_prob until dead code goes, and the next fusion
      // wants the gradient as log_prob's only reader.
      eliminate_dead_code(*model.graph);
      fused += loss_grads + fuse_softmax_cross_entropy_loss_grad(model, first);
    }
    fused += fuse_scatter_add_sum(model, first);
    fused += fuse_scale_into_matmul(model) + fuse_add_softmax(model, first);
    fused += fuse_batchnorm_into_conv(model) + fuse_add_into_conv(model) +
             fuse_activation_into_conv(model) + fuse_transpose_into_matmul(model) +
             fuse_batch_norm_grad(model);
    // After fuse_transpose_into_matmul, which turns a transposed weight's gradient into a Gemm.
    fused += fuse_cast_into_gemm(model, first);
    // The GELU spellings fuse_gelu replaced still read the pre-activation until dead code goes.
    eliminate_dead_code(*model.graph);
    fused += fuse_bias_into_matmul(model, approximate_fusions);
    fused += fuse_matmul_integer_to_float(model);
  }
  if (level >= OptLevel::All && layout.conv_channel_block != 0)
    fused += convert_convs_to_nchwc(model, layout.conv_channel_block, layout.winograd_channel_block);
  size_t dead = eliminate_dead_code(*model.graph);
  spdlog::debug("optimizer: folded {} nodes, fused {}, removed {} dead nodes ({} -> {})", folded,
                fused, dead, before, model.graph->num_nodes());
  return before - model.graph->num_nodes();
}

}  // namespace onyx
