// Data propagation for shape inference: the contents of the small integer tensors through
// which exporters compute shapes at run time (torch.onnx writes Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape for every view()), tracked element by element as known
// integers, symbolic dims ("batch") or unknowns, as ONNX's data propagation and ONNX
// Runtime's symbolic shape inference do. Reshape, Expand, ConstantOfShape, Tile, Range and
// the axes inputs of Unsqueeze/Squeeze/Slice read them, so ranks and dims survive.
// Internal to graph/ (shape_inference.cpp).
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"

namespace onyx::shape_values {

/// One element: a known integer, a symbolic dim, or neither.
struct SymInt {
  std::optional<int64_t> value;
  std::string param;
  static SymInt of(int64_t v) { return {v, {}}; }
  static SymInt of(const Dim& d) {
    return d.is_fixed() ? SymInt{d.value, {}} : SymInt{std::nullopt, d.param};
  }
  bool known() const { return value.has_value(); }
  bool operator==(const SymInt&) const = default;
  /// As a dim: a non-negative known value, a symbol, or unknown.
  Dim dim() const {
    if (value) return *value >= 0 ? Dim::fixed(*value) : Dim{};
    return param.empty() ? Dim{} : Dim::symbol(param);
  }
};

/// The elements of a rank-0 or rank-1 integer tensor.
struct Ints {
  std::vector<SymInt> v;
  bool scalar = false;
  /// All elements known: their values.
  std::optional<std::vector<int64_t>> values() const;
};

/// A symbolic dim as a positive coefficient times a name: "batch" is 1 x batch, "12*batch" is
/// 12 x batch. Data propagation names the product of a symbol and a constant that way (torch
/// reshapes [batch, heads, ...] to [batch * heads, ...] and back), so Reshape can cancel it.
struct ScaledSymbol {
  int64_t coef = 1;
  std::string name;
};
ScaledSymbol split_symbol(const std::string& param);
/// The param of coef x name ("name" alone for 1).
std::string scaled_symbol(int64_t coef, const std::string& name);

/// Propagated contents, by value. Only tensors of at most kMaxElements are tracked.
using Known = std::unordered_map<const Value*, Ints>;
inline constexpr int64_t kMaxElements = 64;

/// The contents of `v` when known: an integer initializer (of `g` or an enclosing graph) or
/// a propagated value.
std::optional<Ints> lookup(const Known& known, const Graph& g, const Value* v);

/// Records what `node`'s outputs hold, from what its inputs hold (after shape inference set
/// the node's output types).
void propagate(const Node& node, const Graph& g, Known& known);

}  // namespace onyx::shape_values
