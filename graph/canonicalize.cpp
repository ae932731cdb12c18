#include "graph/canonicalize.h"

#include <string_view>

#include "graph/saturate_cast.h"

namespace onyx {
namespace {

/// A scalar of `dt` holding `v` (clamped to an integer type's range, NaN as 0: an attribute
/// such as Clip's max = 1e30 on int32 data); float when `dt` is not a plain numeric type.
Tensor numeric_scalar(DataType dt, double v) {
  switch (dt) {
    case DataType::Double:
      return Tensor::scalar<double>(v);
    case DataType::Float16:
      return Tensor::scalar<float16>(static_cast<float>(v));
    case DataType::BFloat16:
      return Tensor::scalar<bfloat16>(static_cast<float>(v));
    case DataType::Int8:
      return Tensor::scalar<int8_t>(saturate_cast<int8_t>(v));
    case DataType::Int16:
      return Tensor::scalar<int16_t>(saturate_cast<int16_t>(v));
    case DataType::Int32:
      return Tensor::scalar<int32_t>(saturate_cast<int32_t>(v));
    case DataType::Int64:
      return Tensor::scalar<int64_t>(saturate_cast<int64_t>(v));
    case DataType::UInt8:
      return Tensor::scalar<uint8_t>(saturate_cast<uint8_t>(v));
    case DataType::UInt16:
      return Tensor::scalar<uint16_t>(saturate_cast<uint16_t>(v));
    case DataType::UInt32:
      return Tensor::scalar<uint32_t>(saturate_cast<uint32_t>(v));
    case DataType::UInt64:
      return Tensor::scalar<uint64_t>(saturate_cast<uint64_t>(v));
    default:
      return Tensor::scalar<float>(static_cast<float>(v));
  }
}

/// Element type of the node's first input, Undefined when unknown.
DataType input_dtype(const Node& n) {
  if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return DataType::Undefined;
  return n.inputs[0]->type.elem;
}

/// Makes `t` an initializer of `g` and input `idx` of `n` (padding omitted inputs).
void attach(Graph& g, Node& n, int idx, const std::string& what, Tensor t) {
  std::string hint = (n.name.empty() ? n.op_type : n.name) + "_" + what;
  Value* v = g.add_initializer(g.add_unique_value(hint)->name, std::move(t));
  if (n.num_inputs() <= idx) n.inputs.resize(static_cast<size_t>(idx) + 1, nullptr);
  g.set_input(&n, idx, v);
}

/// Moves an ints attribute into input `idx` as a 1-D int64 tensor.
void ints_to_input(Graph& g, Node& n, const std::string& attr, int idx) {
  if (!n.has_attr(attr)) return;
  auto v = n.attr_ints(attr);
  attach(g, n, idx, attr, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  n.attrs.erase(attr);
}

/// Moves a float attribute into input `idx` as a scalar of the first input's dtype.
void float_to_input(Graph& g, Node& n, const std::string& attr, int idx) {
  if (!n.has_attr(attr)) return;
  attach(g, n, idx, attr, numeric_scalar(input_dtype(n), n.attr_float(attr, 0)));
  n.attrs.erase(attr);
}

void axes_input(Graph& g, Node& n) { ints_to_input(g, n, "axes", 1); }

void split_input(Graph& g, Node& n) { ints_to_input(g, n, "split", 1); }

void slice_inputs(Graph& g, Node& n) {
  ints_to_input(g, n, "starts", 1);
  ints_to_input(g, n, "ends", 2);
  ints_to_input(g, n, "axes", 3);
}

void pad_inputs(Graph& g, Node& n) {
  ints_to_input(g, n, "pads", 1);
  ints_to_input(g, n, "paddings", 1);  // Pad-1's name for pads
  float_to_input(g, n, "value", 2);
}

void clip_inputs(Graph& g, Node& n) {
  float_to_input(g, n, "min", 1);
  float_to_input(g, n, "max", 2);
  n.attrs.erase("consumed_inputs");
}

void topk_input(Graph& g, Node& n) {
  if (!n.has_attr("k")) return;
  attach(g, n, 1, "k", Tensor::from_vector<int64_t>({1}, {n.attr_int("k", 0)}));
  n.attrs.erase("k");
}

void dropout_inputs(Graph& g, Node& n) {
  if (n.has_attr("ratio"))
    attach(g, n, 1, "ratio", Tensor::scalar<float>(n.attr_float("ratio", 0.5f)));
  n.attrs.erase("ratio");
  n.attrs.erase("is_test");
  n.attrs.erase("consumed_inputs");
}

// PRelu before opset 7 applies a 1-D slope per channel (axis 1); numpy-style broadcasting,
// which the kernel implements, needs that slope shaped [C, 1, ..., 1].
void prelu_channel_slope(Graph& g, Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return;
  const Tensor* slope = g.initializer(n.inputs[1]);
  const ValueType& x = n.inputs[0]->type;
  if (!slope || slope->rank() != 1 || slope->numel() <= 1 || !x.is_tensor() || !x.shape ||
      x.shape->size() < 3)
    return;
  Shape shape(x.shape->size() - 1, 1);
  shape[0] = slope->numel();
  attach(g, n, 1, "slope", slope->reshape(shape));
}

struct Rule {
  std::string_view op;
  int64_t before;  // applies to models importing ai.onnx below this opset
  void (*apply)(Graph&, Node&);
};

constexpr Rule kRules[] = {
    {"Squeeze", 13, axes_input},          // axes attribute -> input 1
    {"Unsqueeze", 13, axes_input},        // axes attribute -> input 1
    {"ReduceSum", 13, axes_input},        // axes attribute -> input 1
    {"ReduceMax", 18, axes_input},        // axes attribute -> input 1
    {"ReduceMin", 18, axes_input},        // axes attribute -> input 1
    {"ReduceMean", 18, axes_input},       // axes attribute -> input 1
    {"ReduceProd", 18, axes_input},       // axes attribute -> input 1
    {"ReduceL1", 18, axes_input},         // axes attribute -> input 1
    {"ReduceL2", 18, axes_input},         // axes attribute -> input 1
    {"ReduceLogSum", 18, axes_input},     // axes attribute -> input 1
    {"ReduceLogSumExp", 18, axes_input},  // axes attribute -> input 1
    {"ReduceSumSquare", 18, axes_input},  // axes attribute -> input 1
    {"Split", 13, split_input},           // split attribute -> input 1
    {"Slice", 10, slice_inputs},          // starts/ends/axes attributes -> inputs 1..3
    {"Pad", 11, pad_inputs},              // pads (or paddings) -> input 1, value -> input 2
    {"Clip", 11, clip_inputs},            // min/max attributes -> inputs 1, 2 of x's dtype
    {"TopK", 10, topk_input},             // k attribute -> input 1
    {"Dropout", 12, dropout_inputs},      // ratio -> input 1; is_test is meaningless now
    {"PRelu", 7, prelu_channel_slope},    // per-channel 1-D slope -> [C, 1, ..., 1]
};

void canonicalize_graph(Graph& g, int64_t opset) {
  for (const auto& node : g.nodes()) {
    Node& n = *node;
    if (n.domain.empty())
      for (const Rule& r : kRules)
        if (n.op_type == r.op && opset < r.before) r.apply(g, n);
    for (auto& [name, a] : n.attrs) {
      if (a.g) canonicalize_graph(*a.g, opset);
      for (auto& sub : a.graphs)
        if (sub) canonicalize_graph(*sub, opset);
    }
  }
}

}  // namespace

void canonicalize_opsets(Model& model) {
  if (model.graph) canonicalize_graph(*model.graph, model.opset(""));
}

}  // namespace onyx
