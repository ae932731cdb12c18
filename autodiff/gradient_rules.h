// Gradient rules: one plain function per op type, kept in a table (STYLE.md habit 2).
//
// A rule sees one forward node through a GradContext and emits backward nodes made of
// ordinary forward ONNX ops (opset >= 13 forms: axes as inputs), reusing saved forward
// values. It sets the gradient of each input that wants one:
//
//   void relu_grad(GradContext& c) {          // dx = dy * (x > 0)
//     Value* mask = c.op("Greater", {c.in(0), c.scalar(0.0, c.in(0))});
//     c.set_din(0, c.op("Mul", {c.dout(0), c.op("Cast", {mask}, {c.attr_dtype_of(c.in(0))})}));
//   }
//
// The builder sums contributions from several consumers, and prunes inputs that need no
// gradient (integer tensors, non-trainable paths): a rule checks c.wants(i) and emits
// nothing for inputs that do not.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace onyx::autodiff {

// Attributes of emitted nodes are built with Attribute::of_int / of_float / of_ints / of_string.
using Attrs = std::vector<Attribute>;

class GradContext {
 public:
  GradContext(Graph& g, Node& fwd, std::vector<Value*> douts, std::vector<bool> wants);

  /// The forward node being differentiated.
  const Node& node() const { return fwd_; }
  /// Forward input / output i (nullptr when omitted).
  Value* in(int i) const { return fwd_.has_input(i) ? fwd_.inputs[i] : nullptr; }
  Value* out(int i) const;
  /// Forward output i, created when the model omitted it (e.g. Dropout's mask, so the
  /// backward pass can reuse it instead of recomputing).
  Value* ensure_out(int i);
  /// Gradient flowing into forward output i; nullptr when nothing downstream needs it.
  Value* dout(int i) const { return i < static_cast<int>(douts_.size()) ? douts_[i] : nullptr; }
  /// True when forward input i needs a gradient.
  bool wants(int i) const { return i < static_cast<int>(wants_.size()) && wants_[i]; }
  /// Records the gradient of input i (same shape as the input; see sum_to for broadcasting).
  void set_din(int i, Value* g);
  const std::vector<Value*>& dins() const { return dins_; }
  /// The model's ai.onnx opset (set by the builder); rules emitting newer op forms check it.
  int64_t opset() const { return opset_; }
  void set_opset(int64_t v) { opset_ = v; }
  /// The model being differentiated (set by the builder): rules that differentiate a subgraph
  /// or their own expansion pass it on to differentiate_nodes.
  const Model& model() const;
  void set_model(const Model* m) { model_ = m; }
  /// The graph the rule emits into (where the forward node lives).
  Graph& graph() { return g_; }

  // ---- values the node's subgraphs read from this graph (If/Loop: Node::implicit_inputs) ----
  /// True when outer value v, read inside a subgraph of the node, needs a gradient.
  bool wants_implicit(const Value* v) const;
  void set_wants_implicit(std::vector<Value*> vs) { implicit_wants_ = std::move(vs); }
  const std::vector<Value*>& implicit_wants() const { return implicit_wants_; }
  /// Records the gradient of the implicitly read value v.
  void set_dimplicit(Value* v, Value* g);
  const std::map<Value*, Value*>& implicit_dins() const { return implicit_dins_; }

  // ---- emission helpers: each adds one node (or initializer) to the graph ----
  /// One-output node.
  Value* op(const std::string& op_type, const std::vector<Value*>& inputs, Attrs attrs = {});
  /// Node with `n` outputs.
  std::vector<Value*> op_n(const std::string& op_type, const std::vector<Value*>& inputs, int n,
                           Attrs attrs = {});
  /// Scalar constant with `like`'s dtype (shape [] ), as an initializer.
  Value* scalar(double v, const Value* like);
  /// 1-D int64 constant.
  Value* ints(const std::vector<int64_t>& v);
  /// 0-D int64 constant.
  Value* int_scalar(int64_t v);
  /// Cast attribute "to" = dtype of `like`.
  Attribute attr_dtype_of(const Value* like) const;
  /// Casts `v` to the dtype of `like`.
  Value* cast_like(Value* v, const Value* like);
  /// Undoes numpy broadcasting: sums `g` (shaped like the broadcast result) down to `like`'s
  /// shape. Static when both shapes are known (symbols equal by name), dynamic otherwise.
  Value* sum_to(Value* g, Value* like);
  /// Shape(v) as a value.
  Value* shape_of(Value* v);
  /// `op` (ReduceSum, ReduceMean, ReduceProd, ...) of v over `axes` (empty: every axis), with
  /// axes in the form the model's opset takes: an input (ReduceSum from 13, the rest from 18)
  /// or the older attribute.
  Value* reduce(const std::string& op, Value* v, const std::vector<int64_t>& axes, bool keepdims);

  // ---- static facts about values (from shape inference) ----
  DataType dtype(const Value* v) const;
  /// Rank when known, else -1.
  int rank(const Value* v) const;
  const std::optional<SymShape>& sym_shape(const Value* v) const;
  /// Normalises a possibly negative axis against rank r; onyx::Error when out of range.
  int64_t norm_axis(int64_t axis, int64_t r) const;
  /// "[autodiff] Conv node 'c1'" prefix for errors.
  std::string label() const;

 private:
  Value* fresh(const std::string& hint);
  Graph& g_;
  Node& fwd_;
  std::vector<Value*> douts_;
  std::vector<bool> wants_;
  std::vector<Value*> dins_;
  std::vector<Value*> implicit_wants_;
  std::map<Value*, Value*> implicit_dins_;
  int64_t opset_ = 0;
  const Model* model_ = nullptr;
};

using GradRule = std::function<void(GradContext&)>;

/// The values of `v` when they are constant: an initializer, or a Constant node's value (tensor,
/// value_float, value_int, value_floats, value_ints), as exporters write attribute-like inputs
/// (torch.onnx: Dropout's ratio, Resize's scales). nullopt when computed at run time or omitted.
std::optional<Tensor> const_tensor(const Value* v);

/// Op type -> rule (ai.onnx ops, plus the loss ops this layer emits).
class RuleTable {
 public:
  void add(const std::string& op_type, GradRule rule);
  const GradRule* find(const std::string& op_type) const;
  std::vector<std::string> op_types() const;

 private:
  std::map<std::string, GradRule> rules_;
};

/// All rules, built once.
const RuleTable& gradient_rules();

/// The builder's core (training_graph.cpp), for rules that differentiate a subgraph (If
/// branches, Loop bodies) or their own expansion into other ops (RNN/GRU/LSTM): appends to `g`
/// the backward of `order` (nodes of `g` in topological order; nodes left out are treated as
/// constants), seeded with `seeds` (value -> incoming gradient). Returns the gradient of each
/// `wrt` value (zeros where none flows).
std::map<Value*, Value*> differentiate_nodes(const Model& model, Graph& g,
                                             const std::vector<Node*>& order,
                                             const std::map<Value*, Value*>& seeds,
                                             const std::vector<Value*>& wrt);

/// Ops that train without a rule of their own, as (canonical domain, op type): the builder
/// rewrites them into ops that have rules before differentiating (Upsample into its opset-13
/// Resize form; com.microsoft FusedMatMul and FusedConv by defuse_contrib_ops).
const std::vector<std::pair<std::string, std::string>>& rewritten_op_types();

/// Rewrites the com.microsoft fused ops an optimizer writes (FusedMatMul, FusedConv) into the
/// ai.onnx ops they fuse (contrib_ops.cpp); onyx::Error for forms it cannot state.
void defuse_contrib_ops(Model& m);

// One registration function per op family (rules_<family>.cpp).
// Add Sub Mul Div Neg Pow Sqrt Exp Log Abs Reciprocal Sin Cos Min Max Sum Mean Clip Where Cast Identity
// Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh CastLike Mod Sign Floor Ceil Round
void add_elementwise_rules(RuleTable& t);
// Relu LeakyRelu Sigmoid Tanh Erf Gelu Softplus Softmax LogSoftmax HardSigmoid Elu Selu Dropout
// HardSwish Mish PRelu Softsign ThresholdedRelu Celu Shrink Swish SwiGLU Hardmax
void add_activation_rules(RuleTable& t);
// Reshape Flatten Squeeze Unsqueeze Transpose Concat Split Slice Gather GatherElements Expand Tile Pad
// DepthToSpace SpaceToDepth Trilu GatherND ScatterND ScatterElements TopK ReverseSequence
// CenterCropPad
void add_shape_rules(RuleTable& t);
// ReduceSum ReduceMean ReduceMax ReduceMin CumSum
// ReduceProd ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum ReduceLogSumExp
void add_reduce_rules(RuleTable& t);
// MatMul Gemm Einsum
void add_linalg_rules(RuleTable& t);
// Conv ConvTranspose MaxPool AveragePool LpPool GlobalAveragePool GlobalMaxPool
void add_nn_rules(RuleTable& t);
// BatchNormalization LayerNormalization RMSNormalization GroupNormalization InstanceNormalization
// LpNormalization MeanVarianceNormalization LRN
void add_norm_rules(RuleTable& t);
// SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss
void add_loss_rules(RuleTable& t);
// If Loop
void add_control_flow_rules(RuleTable& t);
// RNN GRU LSTM
void add_rnn_rules(RuleTable& t);
// Attention RotaryEmbedding
void add_attention_rules(RuleTable& t);
// Resize GridSample
void add_spatial_rules(RuleTable& t);

}  // namespace onyx::autodiff
