#include "graph/autocast.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/error.h"
#include "graph/schema.h"

namespace onyx {

Precision parse_precision(std::string_view text) {
  if (text == "fp32" || text == "float32" || text == "float") return Precision::Float32;
  if (text == "bf16" || text == "bfloat16") return Precision::BFloat16;
  if (text == "fp16" || text == "float16" || text == "half") return Precision::Float16;
  ONYX_THROW("[precision] '{}' is not a precision; expected fp32, bf16 or fp16", text);
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::BFloat16: return "bf16";
    case Precision::Float16: return "fp16";
    default: return "fp32";
  }
}

DataType precision_dtype(Precision p) {
  switch (p) {
    case Precision::BFloat16: return DataType::BFloat16;
    case Precision::Float16: return DataType::Float16;
    default: return DataType::Float;
  }
}

const std::vector<PolicyRow>& autocast_policy_table() {
  // After PyTorch's autocast lists (CUDA's float32 list, which is the stricter one: softmax,
  // norms and sums lose too much in 8 mantissa bits), in ONNX op terms.
  static const std::vector<PolicyRow> rows = {
      // Matrix products and convolutions: the work the low format speeds up; oneDNN (and
      // cuBLAS) accumulate them in float32.
      {"", "MatMul", CastPolicy::Lower},
      {"", "Gemm", CastPolicy::Lower},
      {"", "Conv", CastPolicy::Lower},
      {"", "ConvTranspose", CastPolicy::Lower},
      {"", "Einsum", CastPolicy::Lower},
      {"", "Attention", CastPolicy::Lower},
      {"com.microsoft", "FusedMatMul", CastPolicy::Lower},
      {"com.microsoft", "Attention", CastPolicy::Lower},
      {"com.microsoft", "MultiHeadAttention", CastPolicy::Lower},
      // Normalisations: their statistics need float32.
      {"", "Softmax", CastPolicy::Float32},
      {"", "LogSoftmax", CastPolicy::Float32},
      {"", "LayerNormalization", CastPolicy::Float32},
      {"", "BatchNormalization", CastPolicy::Float32},
      {"", "GroupNormalization", CastPolicy::Float32},
      {"", "InstanceNormalization", CastPolicy::Float32},
      {"", "RMSNormalization", CastPolicy::Float32},
      {"", "LpNormalization", CastPolicy::Float32},
      {"", "MeanVarianceNormalization", CastPolicy::Float32},
      {"com.microsoft", "SimplifiedLayerNormalization", CastPolicy::Float32},
      {"com.microsoft", "SkipLayerNormalization", CastPolicy::Float32},
      {"com.microsoft", "SkipSimplifiedLayerNormalization", CastPolicy::Float32},
      // Reductions and running sums.
      {"", "ReduceSum", CastPolicy::Float32},
      {"", "ReduceMean", CastPolicy::Float32},
      {"", "ReduceProd", CastPolicy::Float32},
      {"", "ReduceSumSquare", CastPolicy::Float32},
      {"", "ReduceL1", CastPolicy::Float32},
      {"", "ReduceL2", CastPolicy::Float32},
      {"", "ReduceLogSum", CastPolicy::Float32},
      {"", "ReduceLogSumExp", CastPolicy::Float32},
      {"", "CumSum", CastPolicy::Float32},
      // Losses.
      {"", "SoftmaxCrossEntropyLoss", CastPolicy::Float32},
      {"", "NegativeLogLikelihoodLoss", CastPolicy::Float32},
      // Functions whose range or slope outgrows 8 mantissa bits.
      {"", "Exp", CastPolicy::Float32},
      {"", "Log", CastPolicy::Float32},
      {"", "Pow", CastPolicy::Float32},
      {"", "Reciprocal", CastPolicy::Float32},
      {"", "Softplus", CastPolicy::Float32},
      {"", "Acos", CastPolicy::Float32},
      {"", "Asin", CastPolicy::Float32},
      {"", "Cosh", CastPolicy::Float32},
      {"", "Sinh", CastPolicy::Float32},
      {"", "Tan", CastPolicy::Float32},
  };
  return rows;
}

CastPolicy autocast_policy(const std::string& domain, const std::string& op_type) {
  std::string d = canonical_domain(domain);
  for (const PolicyRow& r : autocast_policy_table())
    if (r.op_type == op_type && d == r.domain) return r.policy;
  return CastPolicy::Follow;
}

namespace {

bool is_autocast_float(DataType t, DataType low) { return t == DataType::Float || t == low; }

/// One model's rewrite: per-value cast cache, the low format, counters.
class Autocaster {
 public:
  Autocaster(Model& m, DataType low, const AutocastOptions& opt) : m_(m), g_(*m.graph), low_(low), opt_(opt) {}

  AutocastReport run() {
    for (const auto& n : g_.nodes())
      for (Value* v : n->implicit_inputs) captured_.insert(v);
    for (const Value* o : g_.outputs) original_out_[o] = o->type.elem;
    for (Node* n : g_.topological_order()) rewrite(*n);
    hoist_casts_above_layout_ops();
    g_.sort_topologically();
    return report_;
  }

 private:
  Model& m_;
  Graph& g_;
  DataType low_;
  const AutocastOptions& opt_;
  AutocastReport report_;
  std::set<const Value*> captured_;                 // read by subgraphs: kept float32
  std::map<const Value*, DataType> original_out_;   // graph outputs keep these types
  std::map<std::pair<const Value*, DataType>, Value*> cast_cache_;

  static DataType dtype_of(const Value* v) {
    return v && v->type.is_tensor() ? v->type.elem : DataType::Undefined;
  }

  /// Initializers, Constant outputs and casts of them: they follow the activations they meet.
  bool constant_like(const Value* v) const {
    for (int depth = 0; v && depth < 8; ++depth) {
      if (g_.is_initializer(v)) return true;
      const Node* p = v->producer;
      if (!p) return false;
      if (p->op_type == "Constant" && p->domain.empty()) return true;
      if (p->op_type != "Cast" || p->inputs.empty()) return false;
      v = p->inputs[0];
    }
    return false;
  }

  static const char* suffix(DataType dt) {
    return dt == DataType::Float ? "_fp32" : dt == DataType::BFloat16 ? "_bf16" : "_fp16";
  }

  /// Adds `out` = Cast(`in`, to = dt), remembered as `in`'s value of type dt.
  void add_cast(Value* in, Value* out, DataType dt) {
    Node* c = g_.add_node("Cast", {in}, {out}, "", out->name + "_autocast");
    c->attrs["to"] = Attribute::of_int("to", static_cast<int64_t>(dt));
    ++report_.casts;
    cast_cache_[{in, dt}] = out;
  }

  /// `v` as `dt`: the cached cast, or a new Cast node (so each value is cast once per type).
  Value* cast(Value* v, DataType dt) {
    if (auto it = cast_cache_.find({v, dt}); it != cast_cache_.end()) return it->second;
    Value* out = g_.add_unique_value(v->name + suffix(dt));
    out->type = v->type;
    out->type.elem = dt;
    add_cast(v, out, dt);
    return out;
  }

  /// Ops that only move elements, one output holding all of the data input's elements: a cast
  /// after them equals the cast before them, bit for bit.
  static bool moves_elements(const Node* n) {
    static const std::set<std::string> ops{"Transpose", "Reshape", "Squeeze", "Unsqueeze",
                                           "Flatten", "Identity"};
    return n && n->domain.empty() && ops.count(n->op_type) && n->outputs.size() == 1 &&
           n->num_inputs() >= 1 && n->inputs[0];
  }

  /// Cast(to = low)(L(x)) with L moving elements of a float32 x and its output read by the Cast
  /// alone -> L(Cast(x)): the layout op moves half the bytes, and a weight's cast reads the
  /// weight itself. torch.onnx writes nn.Linear on 3-D input as MatMul(x, Transpose(W)); the
  /// weight was transposed in float32 every step, then cast, and the Transpose could not fold
  /// into the product (GPT-2-style training in bf16: 85 ms of Transposes against 12 in float32).
  void hoist_casts_above_layout_ops() {
    bool changed = true;
    while (changed) {
      changed = false;
      std::vector<Node*> casts;
      for (const auto& n : g_.nodes())
        if (n->op_type == "Cast" && n->domain.empty() && n->attr_int("to", 0) == static_cast<int64_t>(low_))
          casts.push_back(n.get());
      for (Node* c : casts) {
        Value* v = c->inputs.empty() ? nullptr : c->inputs[0];
        Node* layout = v ? v->producer : nullptr;
        if (!moves_elements(layout) || dtype_of(v) != DataType::Float) continue;
        Value* x = layout->inputs[0];
        if (dtype_of(x) != DataType::Float || captured_.count(x) || captured_.count(v) ||
            original_out_.count(v) || v->consumers.size() != 1 || original_out_.count(c->outputs[0]))
          continue;
        Value* out = c->outputs[0];
        // The cast's readers read the layout op's output, now of the low type.
        g_.remove_node(c);
        --report_.casts;
        for (auto it = cast_cache_.begin(); it != cast_cache_.end();)
          it = it->second == out ? cast_cache_.erase(it) : std::next(it);
        g_.replace_all_uses(out, v);
        g_.set_input(layout, 0, cast(x, low_));
        v->type.elem = low_;
        changed = true;
      }
    }
  }

  /// The op's schema (schema.cpp adds bfloat16 wherever float16 is accepted) and the
  /// caller's kernels both take the low format for constraint `type_str`.
  bool allowed_low(const Node& n, const OpSchema* schema, const std::string& type_str) const {
    if (schema) {
      auto it = schema->constraints.find(type_str);
      if (it != schema->constraints.end()) {
        std::string want = std::string("tensor(") + (low_ == DataType::BFloat16 ? "bfloat16" : "float16") + ")";
        if (std::find(it->second.begin(), it->second.end(), want) == it->second.end()) return false;
      }
    }
    return !opt_.supports || opt_.supports(n, low_);
  }

  void rewrite(Node& n) {
    if ((n.op_type == "Cast" || n.op_type == "CastLike") && n.domain.empty()) return;
    // Which inputs must share one float type: those of one type constraint ("T").
    const int64_t opset = m_.opset(n.domain);
    const OpSchema* schema = find_schema(n.op_type, n.domain, opset);
    std::map<std::string, std::vector<int>> groups;  // constraint -> float inputs
    std::vector<int> pinned;                         // float inputs of literal float32 type
    bool any_float = false;
    for (int i = 0; i < n.num_inputs(); ++i) {
      Value* v = n.inputs[i];
      if (!v || !is_autocast_float(dtype_of(v), low_)) continue;
      any_float = true;
      const FormalParam* fp = schema ? schema->input_param(i) : nullptr;
      if (fp && schema->constraints.count(fp->type_str)) groups[fp->type_str].push_back(i);
      else pinned.push_back(i);
    }
    if (!any_float) return;
    CastPolicy policy = schema ? autocast_policy(n.domain, n.op_type) : CastPolicy::Float32;
    bool has_subgraph = false;
    for (const auto& [k, a] : n.attrs)
      has_subgraph = has_subgraph || a.type == Attribute::Type::Graph || a.type == Attribute::Type::Graphs;
    bool feeds_subgraph = false;
    for (const Value* o : n.outputs) feeds_subgraph = feeds_subgraph || (o && captured_.count(o));
    if (has_subgraph || feeds_subgraph) policy = CastPolicy::Float32;

    std::map<std::string, DataType> target;
    for (const auto& [ts, members] : groups) {
      DataType t = DataType::Float;
      if (policy == CastPolicy::Lower) {
        t = low_;
      } else if (policy == CastPolicy::Follow) {
        // The activations decide; constants (weights, biases, scalars) take their type.
        bool any_act = false, all_low = true;
        for (int i : members) {
          if (constant_like(n.inputs[i])) continue;
          any_act = true;
          all_low = all_low && dtype_of(n.inputs[i]) == low_;
        }
        if (!any_act) continue;  // only constants: leave as they are
        t = all_low ? low_ : DataType::Float;
      }
      if (t == low_ && !allowed_low(n, schema, ts)) t = DataType::Float;
      target[ts] = t;
    }
    bool lowered = false;
    for (const auto& [ts, t] : target) {
      lowered = lowered || t == low_;
      for (int i : groups[ts])
        if (dtype_of(n.inputs[i]) != t) g_.set_input(&n, i, cast(n.inputs[i], t));
    }
    for (int i : pinned)
      if (dtype_of(n.inputs[i]) != DataType::Float) g_.set_input(&n, i, cast(n.inputs[i], DataType::Float));
    if (lowered) ++report_.lowered;
    else if (policy != CastPolicy::Follow || !target.empty()) ++report_.float32;
    // Outputs of a retyped constraint change type with it.
    for (int j = 0; schema && j < static_cast<int>(n.outputs.size()); ++j) {
      Value* o = n.outputs[j];
      const FormalParam* fp = schema->output_param(j);
      if (!o || !fp) continue;
      auto it = target.find(fp->type_str);
      if (it == target.end() || !is_autocast_float(dtype_of(o), low_) || dtype_of(o) == it->second) continue;
      retype_output(n, j, it->second);
    }
  }

  /// Output j of `n` becomes `dt`. A graph output keeps its name and type: the node writes a
  /// new value and a Cast restores the declared type under the old name.
  void retype_output(Node& n, int j, DataType dt) {
    Value* o = n.outputs[j];
    auto declared = original_out_.find(o);
    if (declared == original_out_.end()) {
      o->type.elem = dt;
      return;
    }
    Value* inner = g_.add_unique_value(o->name + suffix(dt));
    inner->type = o->type;
    inner->type.elem = dt;
    auto consumers = o->consumers;
    for (auto [c, i] : consumers)
      if (i >= 0) g_.set_input(c, i, inner);
    n.outputs[j] = inner;
    inner->producer = &n;
    inner->producer_output = j;
    o->producer = nullptr;
    o->producer_output = -1;
    add_cast(inner, o, declared->second);
  }
};

}  // namespace

std::string autocast_summary(const AutocastReport& r, Precision p) {
  return fmt::format("{}: {} nodes in {}, {} kept in float32, {} casts", precision_name(p), r.lowered,
                     precision_name(p), r.float32, r.casts);
}

AutocastReport autocast(Model& model, Precision p, const AutocastOptions& options) {
  ONYX_CHECK(model.graph, "[autocast] the model has no graph");
  if (p == Precision::Float32) return {};
  return Autocaster(model, precision_dtype(p), options).run();
}

}  // namespace onyx
