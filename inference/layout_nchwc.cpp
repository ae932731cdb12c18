// The NCHWc layout pass: 2-D float32 convolutions run on channel-blocked tensors
// [N, ceil(C/b), H, W, b] (oneDNN's nChw8c / nChw16c) or channels-last ones [N, 1, H, W, C]
// (block -1: one block of every channel, NHWC in memory), so a chain of convolutions never
// converts back to NCHW between them; a MaxPool or GlobalAveragePool of a blocked tensor reads
// it as it is. ToNchwc / FromNchwc reorders sit at the boundary, one per
// value; a value others read in NCHW keeps its name, produced by a FromNchwc.
#include <unordered_map>

#include "inference/fusion_util.h"
#include "inference/optimizer.h"

namespace onyx {
namespace {

constexpr const char* kDomain = "ai.onyx";

bool is_float_or_unknown(const Value* v) {
  return !v || v->type.elem == DataType::Undefined || v->type.elem == DataType::Float;
}

/// A Conv or FusedConv the blocked kernel runs: 2-D, float32, constant weights, one group,
/// output channels a multiple of the block (any count for channels-last), no negative pads.
bool convertible(const Graph& g, const Node& n, int64_t block) {
  bool conv = n.op_type == "Conv" && n.domain.empty();
  bool fused = n.op_type == "FusedConv" && n.domain == "com.microsoft";
  if ((!conv && !fused) || !n.has_input(0) || n.outputs.empty() || !n.outputs[0]) return false;
  const Tensor* W = constant_value(g, n.inputs[1]);
  if (!W || W->dtype() != DataType::Float || W->rank() != 4 || W->dim(0) < 1 || W->dim(1) < 1 ||
      (block > 0 && W->dim(0) % block != 0))
    return false;
  if (n.attr_int("group", 1) != 1) return false;
  for (int64_t p : n.attr_ints("pads"))
    if (p < 0) return false;
  for (int i = 0; i < n.num_inputs(); ++i)
    if (i != 1 && !is_float_or_unknown(n.inputs[i])) return false;
  return true;
}

/// A MaxPool the blocked kernel runs: 2-D, float32 or unknown, Indices not read, and pads
/// below the window so oneDNN's output size is ONNX's.
bool convertible_pool(const Graph& g, const Node& n) {
  if (n.op_type != "MaxPool" || !n.domain.empty() || !n.has_input(0) || n.outputs.empty() ||
      !n.outputs[0] || !is_float_or_unknown(n.inputs[0]))
    return false;
  if (n.outputs.size() > 1 && n.outputs[1] &&
      (!n.outputs[1]->consumers.empty() || is_graph_output(g, n.outputs[1])))
    return false;
  std::vector<int64_t> k = n.attr_ints("kernel_shape"), d = n.attr_ints("dilations", {1, 1}),
                       pads = n.attr_ints("pads", {0, 0, 0, 0});
  if (k.size() != 2 || d.size() != 2 || pads.size() != 4) return false;
  for (size_t i = 0; i < 4; ++i)
    if (pads[i] < 0 || pads[i] >= (k[i % 2] - 1) * d[i % 2] + 1) return false;
  return true;
}

/// A convolution oneDNN can run by Winograd's minimal filtering on `block`-channel blocks: 3x3,
/// stride 1, no dilation, input and output channels multiples of the block (convertible()
/// already holds).
bool winograd_eligible(const Graph& g, const Node& n, int64_t block) {
  const Tensor* W = constant_value(g, n.inputs[1]);
  if (W->dim(2) != 3 || W->dim(3) != 3 || W->dim(0) % block != 0 || W->dim(1) % block != 0)
    return false;
  for (const char* a : {"strides", "dilations"})
    for (int64_t v : n.attr_ints(a))
      if (v != 1) return false;
  return true;
}

/// The share of the convertible convolutions' weights (a stand-in for their work, spatial sizes
/// being unknown here) that Winograd could run.
double winograd_share(const Graph& g, int64_t block) {
  double eligible = 0, all = 0;
  for (const auto& n : g.nodes()) {
    if (!convertible(g, *n, block)) continue;
    const double w = static_cast<double>(constant_value(g, n->inputs[1])->numel());
    all += w;
    if (winograd_eligible(g, *n, block)) eligible += w;
  }
  return all > 0 ? eligible / all : 0;
}

/// The type of the blocked twin of `v` (known [N, C, H, W] with C fixed): [N, ceil(C/block),
/// H, W, block], or [N, 1, H, W, C] channels-last; the shape stays unknown otherwise. Kernels
/// read it at session creation (ConvNchwc packs its weights for it).
ValueType blocked_type(const Value* v, int64_t block) {
  ValueType t = ValueType::tensor(DataType::Float);
  if (!v->type.is_tensor() || !v->type.shape || v->type.shape->size() != 4) return t;
  const SymShape& s = *v->type.shape;
  if (!s[1].is_fixed()) return t;
  const int64_t c = s[1].value;
  if (block < 0)
    t.shape = SymShape{s[0], Dim::fixed(1), s[2], s[3], Dim::fixed(c)};
  else
    t.shape = SymShape{s[0], Dim::fixed((c + block - 1) / block), s[2], s[3], Dim::fixed(block)};
  return t;
}

}  // namespace

size_t convert_convs_to_nchwc(Model& model, int64_t block, int64_t winograd_block) {
  Graph& g = *model.graph;
  // Winograd runs a 3x3 stride-1 convolution in 0.4-0.85x the direct kernel's time (oneDNN 2.6,
  // AVX-512) but only on its own block layout, where other convolutions run up to 1.3x slower
  // than on channels-last: worth it when such convolutions hold a good share of the weights
  // (ResNet-18 86 %, ResNet-50 35 %).
  const bool winograd = winograd_block > 0 && winograd_share(g, winograd_block) >= 0.25;
  if (winograd) block = winograd_block;
  std::unordered_map<const Value*, Value*> blocked;    // NCHW value -> its blocked twin
  std::unordered_map<const Value*, int64_t> channels;  // blocked value -> its channel count
  auto to_blocked = [&](Value* v, int64_t c) {
    if (auto it = blocked.find(v); it != blocked.end()) return it->second;
    Value* b = g.add_unique_value(v->name + "_nchwc");
    b->type = blocked_type(v, block);
    Node* r = g.add_node("ToNchwc", {v}, {b}, kDomain, v->name + "_to_nchwc");
    r->attrs["block"] = Attribute::of_int("block", block);
    channels[b] = c;
    return blocked[v] = b;
  };
  // `n` now writes a blocked twin of its output, which a FromNchwc turns back into the value
  // its NCHW readers (and the graph outputs) know.
  auto write_blocked = [&](Node* n, const std::string& op, int64_t c) {
    Value* y = n->outputs[0];
    Value* yb = g.add_unique_value(y->name + "_nchwc");
    yb->type = blocked_type(y, block);
    set_output(n, 0, yb);
    n->op_type = op;
    n->domain = kDomain;
    n->attrs["block"] = Attribute::of_int("block", block);
    Node* back = g.add_node("FromNchwc", {yb}, {y}, kDomain, y->name + "_from_nchwc");
    back->attrs["channels"] = Attribute::of_int("channels", c);
    blocked[y] = yb;
    channels[yb] = c;
  };
  size_t converted = 0;
  for (Node* n : g.topological_order()) {
    Value* x = n->has_input(0) ? n->inputs[0] : nullptr;
    auto twin = blocked.find(x);
    if (convertible(g, *n, block)) {
      const Tensor* W = constant_value(g, n->inputs[1]);
      const int64_t M = W->dim(0), C = W->dim(1);
      // With blocks of 8 or 16, the first convolution (C = 3) reads NCHW directly; others (and
      // every channels-last one: brgconv wants both sides NHWC) read blocked tensors.
      if (twin != blocked.end() || block < 0 || C % block == 0)
        g.set_input(n, 0, to_blocked(x, C));
      if (n->num_inputs() > 3 && n->inputs[3]) g.set_input(n, 3, to_blocked(n->inputs[3], M));
      if (winograd && winograd_eligible(g, *n, block))
        n->attrs["winograd"] = Attribute::of_int("winograd", 1);
      write_blocked(n, "ConvNchwc", M);
    } else if (twin != blocked.end() && convertible_pool(g, *n)) {
      g.set_input(n, 0, twin->second);
      for (size_t o = 1; o < n->outputs.size(); ++o)  // Indices nobody reads
        if (Value* v = n->outputs[o]; v && v->producer == n) v->producer = nullptr;
      n->outputs.resize(1);
      write_blocked(n, "MaxPoolNchwc", channels[twin->second]);
    } else if (twin != blocked.end() && n->op_type == "GlobalAveragePool" && n->domain.empty() &&
               is_float_or_unknown(x)) {
      // Reads the blocked tensor and writes plain [N, C, 1, 1]: no reorder after the last conv.
      g.set_input(n, 0, twin->second);
      n->op_type = "GlobalAveragePoolNchwc";
      n->domain = kDomain;
      n->attrs["channels"] = Attribute::of_int("channels", channels[twin->second]);
    } else {
      continue;
    }
    ++converted;
  }
  if (converted) import_domain(model, kDomain);
  return converted;
}

}  // namespace onyx
