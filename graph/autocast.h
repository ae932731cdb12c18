// Mixed precision as a graph pass: autocast rewrites a float32 graph so the ops that gain
// from a 16-bit float format (matrix products, convolutions) run in it, the ops that lose
// accuracy in it (softmax, normalisation statistics, reductions, losses, exp/log/pow) run in
// float32, and every other op runs in the type of its inputs, like PyTorch's autocast.
//
//   autocast(model, Precision::BFloat16);   // inputs and outputs keep their float32 types
//
// The pass works on plain ONNX (it inserts Cast nodes), so it serves inference sessions and,
// before autodiff, training graphs: the gradient of a float32 weight flows back through its
// Cast and arrives in float32, while the matrix products of forward and backward run in the
// low format. It is provider-neutral: a caller names the ops its kernels can run in the low
// format (AutocastOptions::supports) and the others stay in float32.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "graph/dtype.h"
#include "graph/ir.h"

namespace onyx {

/// The arithmetic a session or training run uses for its compute-heavy ops.
enum class Precision { Float32, BFloat16, Float16 };

/// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; onyx::Error naming the choices
/// otherwise.
Precision parse_precision(std::string_view text);
/// "fp32", "bf16" or "fp16".
const char* precision_name(Precision p);
/// The element type of `p` (Float, BFloat16, Float16).
DataType precision_dtype(Precision p);

/// How autocast treats an op.
enum class CastPolicy {
  Lower,    // runs in the low format: MatMul, Gemm, Conv, ConvTranspose, Einsum, attention
  Float32,  // runs in float32: softmax, norms, reductions, losses, Exp/Log/Pow, ...
  Follow,   // runs in the type of its inputs (float32 when they mix; constants follow)
};
CastPolicy autocast_policy(const std::string& domain, const std::string& op_type);
/// The policy table as (domain, op type, policy) rows, for documentation and `onyx ops`.
struct PolicyRow {
  const char* domain;
  const char* op_type;
  CastPolicy policy;
};
const std::vector<PolicyRow>& autocast_policy_table();

struct AutocastOptions {
  /// Whether the caller can run `node` with its floating inputs in `dtype`; a Lower or
  /// Follow op it refuses runs in float32 instead. Empty: every op can.
  std::function<bool(const Node& node, DataType dtype)> supports;
};

/// What the pass changed.
struct AutocastReport {
  size_t lowered = 0;       // nodes now running in the low format
  size_t float32 = 0;       // nodes the policy (or `supports`) keeps in float32
  size_t casts = 0;         // Cast nodes inserted
};

/// "bf16: 116 nodes in bf16, 23 kept in float32, 82 casts", for logs.
std::string autocast_summary(const AutocastReport& report, Precision p);

/// Rewrites the main graph of `model` in place for precision `p` (Float32: no change).
/// Graph inputs and outputs keep their types; each value is cast at most once per target
/// type, so a weight read by several nodes is cast once; running the pass again changes
/// nothing. Nodes with subgraphs (If, Loop, Scan) and values their subgraphs read stay in
/// float32, as do ops of domains without schemas. Value types must be inferred
/// (infer_types_and_shapes) beforehand; the pass keeps them up to date.
AutocastReport autocast(Model& model, Precision p, const AutocastOptions& options = {});

}  // namespace onyx
