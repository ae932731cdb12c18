#include "autodiff/training_graph.h"

#include <algorithm>
#include <set>
#include <unordered_set>

#include "autodiff/attention_spelling.h"
#include "autodiff/gradient_rules.h"
#include "autodiff/subgraph.h"
#include "graph/error.h"
#include "graph/gelu_pattern.h"
#include "graph/opset_upgrade.h"
#include "graph/sequence_lowering.h"
#include "graph/onnx_io.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

namespace {

/// Inputs through which no gradient flows, whatever their dtype (ratios, bounds, stats).
bool non_differentiable_input(const Node& n, int i) {
  static const std::map<std::string, std::vector<int>> table = {
      {"Dropout", {1, 2}},       {"Clip", {1, 2}},    {"Pad", {1, 2, 3}},
      {"Resize", {1, 2, 3}},     {"Upsample", {1}},   {"BatchNormalization", {3, 4}},
      {"ConstantOfShape", {0}},  {"Range", {0, 1, 2}},    {"CastLike", {1}},
      {"RotaryEmbedding", {1, 2}},
      {"SoftmaxCrossEntropyLoss", {2}}, {"NegativeLogLikelihoodLoss", {2}},
      {"Loop", {0, 1}},          {"If", {0}}};
  auto it = table.find(n.op_type);
  return it != table.end() && std::find(it->second.begin(), it->second.end(), i) != it->second.end();
}

/// Which values need a gradient: on a float path from `wrt` (req) that reaches a seed (rel).
struct Reach {
  std::unordered_set<const Value*> req, rel;
};

Reach analyze(const std::vector<Node*>& order, const std::map<Value*, Value*>& seeds,
              const std::vector<Value*>& wrt) {
  Reach r;
  r.req.insert(wrt.begin(), wrt.end());
  for (Node* n : order) {
    bool any = false;
    for (int i = 0; i < n->num_inputs() && !any; ++i)
      any = n->inputs[i] && r.req.count(n->inputs[i]) && !non_differentiable_input(*n, i);
    for (Value* v : n->implicit_inputs) any = any || r.req.count(v);
    if (!any) continue;
    for (Value* o : n->outputs)
      if (o && (o->type.elem == DataType::Undefined || is_float(o->type.elem))) r.req.insert(o);
  }
  for (const auto& [v, s] : seeds)
    if (r.req.count(v)) r.rel.insert(v);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    bool out_rel = std::any_of(n->outputs.begin(), n->outputs.end(), [&](Value* o) { return o && r.rel.count(o); });
    if (!out_rel) continue;
    for (int i = 0; i < n->num_inputs(); ++i)
      if (n->inputs[i] && r.req.count(n->inputs[i]) && !non_differentiable_input(*n, i)) r.rel.insert(n->inputs[i]);
    for (Value* v : n->implicit_inputs)
      if (r.req.count(v)) r.rel.insert(v);
  }
  return r;
}

Tensor zero_scalar(DataType dt) {
  switch (dt) {
    case DataType::Double: return Tensor::from_vector<double>({1}, {0.0});
    case DataType::Float16: return Tensor::from_vector<float16>({1}, {float16(0.0f)});
    case DataType::BFloat16: return Tensor::from_vector<bfloat16>({1}, {bfloat16(0.0f)});
    default: return Tensor::from_vector<float>({1}, {0.0f});
  }
}

Attribute tensor_attr(const std::string& name, Tensor t) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Tensor;
  a.t = std::move(t);
  return a;
}

/// Adds Identity(src) -> a graph output named `want` (made unique when taken).
Value* named_output(Graph& g, Value* src, const std::string& want) {
  Value* dst = g.find_value(want) ? g.add_unique_value(want) : g.get_or_add_value(want);
  g.add_node("Identity", {src}, {dst}, "", want + "/Identity");
  dst->type = src->type;
  g.outputs.push_back(dst);
  return dst;
}

/// Turns an initializer into a graph input whose default is the initializer (saved as an
/// ONNX input that has an initializer; onyx's loader reads it back as overridable).
void make_overridable_input(Graph& g, Value* v) {
  if (std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end()) g.inputs.push_back(v);
}

/// Up to `limit` of `g`'s floating-point initializer names, sorted, with the count: what a
/// user who named a parameter the model lacks can choose from.
std::string float_initializer_names(const Graph& g, size_t limit = 12) {
  std::vector<std::string> names;
  for (const auto& [name, t] : g.initializers)
    if (is_float(t.dtype()) && t.rank() > 0) names.push_back(name);
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += fmt::format(", ... ({} in all)", names.size());
  return out.empty() ? "none" : out;
}

Value* find_or_throw(const Graph& g, const std::string& name, const char* what) {
  Value* v = g.find_value(name);
  // An exporter's constant folding renames weights it rewrites: torch.onnx.export(dynamo=True)
  // with its default optimize=True stores each Linear weight pre-transposed as "val_<n>".
  ONYX_CHECK(v, "[autodiff] the model has no {} named '{}'; its floating-point initializers are: "
             "{}. Exporters that fold constants rename the weights they transpose (torch.onnx."
             "export(..., dynamo=True) does unless given optimize=False)", what, name,
             float_initializer_names(g));
  return v;
}

/// The GELU spellings (graph/gelu_pattern.h: the Erf form, and the tanh form of GPT-2's
/// "gelu_new") of `order` whose x depends on the parameters and whose constants do not: each is
/// differentiated as one Gelu node (approximate "tanh" for the tanh form), so its gradient reads
/// only x (not the spelling's intermediates, which the forward then frees at once) and execution
/// can fuse the forward Erf spelling into one Gelu kernel and the Gelu rule's nodes into one
/// GeluGrad (inference/fusions_gelu.cpp).
struct GeluUnits {
  std::map<Node*, GeluSpelling> by_last;
  std::set<Node*> tanh;    // the `last` of the tanh-form spellings
  std::set<Node*> inside;  // the spellings' other nodes
};

GeluUnits find_gelus(const Graph& g, const std::vector<Node*>& order, const Reach& r) {
  GeluUnits found;
  const std::set<Node*> in_order(order.begin(), order.end());
  for (Node* n : order) {
    std::optional<GeluSpelling> m = match_erf_gelu(g, n);
    const bool tanh = !m && (m = match_tanh_gelu(g, n));
    if (!m || !r.rel.count(m->x)) continue;
    bool ok = true;
    for (Node* k : m->nodes) {
      ok = ok && in_order.count(k) && !found.inside.count(k);
      for (Value* in : k->inputs) {
        const bool internal = in && in->producer &&
                              std::find(m->nodes.begin(), m->nodes.end(), in->producer) != m->nodes.end();
        ok = ok && (in == m->x || internal || !r.rel.count(in));
      }
    }
    if (!ok) continue;
    for (Node* k : m->nodes)
      if (k != n) found.inside.insert(k);
    found.by_last.emplace(n, std::move(*m));
    if (tanh) found.tanh.insert(n);
  }
  return found;
}

/// The gradient of x through one GELU spelling: the Gelu rule applied to a stand-in node.
Value* gelu_unit_grad(const Model& model, Graph& g, const GeluSpelling& m, bool tanh, Value* dy) {
  Node gelu;
  gelu.name = m.last->name;
  gelu.op_type = "Gelu";
  if (tanh) gelu.attrs["approximate"] = Attribute::of_string("approximate", "tanh");
  gelu.inputs = {m.x};
  gelu.outputs = {m.last->outputs[0]};
  gelu.owner = &g;
  GradContext c(g, gelu, {dy}, {true});
  c.set_opset(model.opset(""));
  c.set_model(&model);
  (*gradient_rules().find("Gelu"))(c);
  ONYX_CHECK(c.dins()[0], "[autodiff] the Gelu rule gave no gradient for {}", m.last->label());
  return c.dins()[0];
}

}  // namespace

std::map<Value*, Value*> differentiate_nodes(const Model& model, Graph& g,
                                             const std::vector<Node*>& order,
                                             const std::map<Value*, Value*>& seeds,
                                             const std::vector<Value*>& wrt) {
  Reach r = analyze(order, seeds, wrt);
  std::map<Value*, std::vector<Value*>> contrib;
  std::map<Value*, Value*> total;
  for (const auto& [v, s] : seeds) contrib[v].push_back(s);
  // The summed gradient of v (nullptr when none); a Sum node when several consumers contribute.
  auto finalize = [&](Value* v) -> Value* {
    if (auto it = total.find(v); it != total.end()) return it->second;
    auto& c = contrib[v];
    Value* res = nullptr;
    if (c.size() == 1) {
      res = c[0];
    } else if (c.size() > 1) {
      res = g.add_unique_value(v->name + "_grad/sum");
      g.add_node("Sum", c, {res}, "", res->name);
    }
    if (res && res->type.kind == ValueType::Kind::Unknown) res->type = v->type;
    total[v] = res;
    return res;
  };
  const GeluUnits gelus = find_gelus(g, order, r);
  std::set<Node*> in_gelus = gelus.inside;
  for (const auto& [last, m] : gelus.by_last) in_gelus.insert(last);
  const AttentionSpellings attns = find_attention_spellings(
      model, g, order, [&](const Value* v) { return r.rel.count(v) != 0; }, in_gelus);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (gelus.inside.count(n) || attns.inside.count(n)) continue;
    if (auto m = gelus.by_last.find(n); m != gelus.by_last.end()) {
      if (Value* dy = finalize(n->outputs[0]))
        contrib[m->second.x].push_back(gelu_unit_grad(model, g, m->second, gelus.tanh.count(n) != 0, dy));
      continue;
    }
    if (auto m = attns.by_last.find(n); m != attns.by_last.end()) {
      const AttentionSpelling& a = m->second;
      if (Value* dy = finalize(n->outputs[0])) {
        const std::vector<Value*> ins = {a.q, a.kt, a.v};
        std::vector<bool> wants;
        for (Value* v : ins) wants.push_back(r.rel.count(v) != 0);
        const std::vector<Value*> d = attention_spelling_grad(model, g, a, dy, wants);
        for (size_t i = 0; i < ins.size(); ++i)
          if (d[i]) contrib[ins[i]].push_back(d[i]);
      }
      continue;
    }
    std::vector<Value*> douts(n->outputs.size(), nullptr);
    bool any = false;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      Value* o = n->outputs[i];
      if (o && r.rel.count(o)) any = (douts[i] = finalize(o)) != nullptr || any;
    }
    if (!any) continue;
    std::vector<bool> wants(n->inputs.size(), false);
    bool wanted = false;
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      wants[i] = n->inputs[i] && r.rel.count(n->inputs[i]) && !non_differentiable_input(*n, static_cast<int>(i));
      wanted = wanted || wants[i];
    }
    std::vector<Value*> implicit;
    for (Value* v : n->implicit_inputs)
      if (r.rel.count(v)) implicit.push_back(v);
    if (!wanted && implicit.empty()) continue;
    const GradRule* rule = gradient_rules().find(n->op_type);
    ONYX_CHECK(rule && canonical_domain(n->domain).empty(),
               "[autodiff] no gradient rule for op {} ({}), which lies between the trainable "
               "parameters and the loss", n->op_type, n->label());
    GradContext c(g, *n, douts, wants);
    c.set_opset(model.opset(""));
    c.set_model(&model);
    c.set_wants_implicit(implicit);
    (*rule)(c);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (!wants[i]) continue;
      ONYX_CHECK(c.dins()[i], "[autodiff] the gradient rule of {} gives no gradient for input {} ('{}')",
                 n->label(), i, n->inputs[i]->name);
      contrib[n->inputs[i]].push_back(c.dins()[i]);
    }
    for (Value* v : implicit) {
      auto d = c.implicit_dins().find(v);
      ONYX_CHECK(d != c.implicit_dins().end(), "[autodiff] {} reads '{}' inside a subgraph on the "
                 "path from the parameters to the loss; gradients through the subgraphs of {} are "
                 "not supported", n->label(), v->name, n->op_type);
      contrib[v].push_back(d->second);
    }
  }
  std::map<Value*, Value*> grads;
  for (Value* w : wrt) {
    Value* gv = r.rel.count(w) ? finalize(w) : nullptr;
    if (!gv) {
      // Not connected to any seed: the gradient is exactly zero.
      Value* shape = g.add_unique_value(w->name + "_grad/shape");
      g.add_node("Shape", {w}, {shape}, "", shape->name);
      gv = g.add_unique_value(w->name + "_grad/zeros");
      Node* z = g.add_node("ConstantOfShape", {shape}, {gv}, "", gv->name);
      z->attrs["value"] = tensor_attr("value", zero_scalar(w->type.elem));
      gv->type = w->type;
    }
    grads[w] = gv;
  }
  return grads;
}

std::map<Value*, Value*> differentiate(Model& model, const std::map<Value*, Value*>& seeds,
                                       const std::vector<Value*>& wrt) {
  Graph& g = *model.graph;
  return differentiate_nodes(model, g, g.topological_order(), seeds, wrt);
}

namespace {

/// Default trainable set: float initializers of rank >= 1 that reach the loss through a
/// differentiable input. Rank-0 ones are left out: exporters (torch.onnx's dynamo exporter)
/// store constants such as an attention scale, a Pow exponent or a -inf mask fill as 0-d
/// initializers, and training them is never meant (a scalar parameter is named explicitly).
std::vector<std::string> default_params(Model& m, Value* loss) {
  Graph& g = *m.graph;
  std::vector<Value*> cands;
  for (const auto& [name, t] : g.initializers)
    if (is_float(t.dtype()) && t.rank() > 0) cands.push_back(g.find_value(name));
  std::sort(cands.begin(), cands.end(), [](Value* a, Value* b) { return a->name < b->name; });
  std::map<Value*, Value*> seeds = {{loss, loss}};
  Reach r = analyze(g.topological_order(), seeds, cands);
  std::vector<std::string> out;
  for (Value* v : cands)
    if (r.rel.count(v)) out.push_back(v->name);
  return out;
}

void switch_to_training_mode(Graph& g, TrainingGraph& tg) {
  tg.state_updates = set_training_mode(g, true);
}

}  // namespace

void prepare_for_training(Model& m) {
  // Opset 7-12 models are rewritten to opset-13 meanings first (the rules emit opset-13 ops),
  // and com.microsoft fused ops into the ai.onnx ops they fuse.
  upgrade_to_opset13(m);
  defuse_contrib_ops(m);
  // No ai.onnx op changed meaning from 13 to 14; 14 lets BatchNormalization train.
  for (auto& o : m.opsets)
    if (canonical_domain(o.domain).empty() && o.version == 13) o.version = 14;
  infer_types_and_shapes(m);
  // After shape inference, which fixes the dims a sequence's pieces are cut from.
  if (lower_indexed_sequences(*m.graph) > 0) infer_types_and_shapes(m);
}

namespace {

/// torch's running variance: m*old + (1-m)*var*n/(n-1) (unbiased), where ONNX's update `upd`
/// is m*old + (1-m)*var. So torch's value is upd + (upd - m*old)/(n-1), n = |X| / C.
Value* torch_running_var(Graph& g, Node* bn, Value* old, Value* upd) {
  const std::string p = bn->name + "/unbiased_var";
  DataType dt = g.initializers.at(old->name).dtype();
  auto scalar = [&](const char* hint, double v) {
    Value* c = g.add_unique_value(p + "/" + hint);
    Tensor t = Tensor::empty(dt, {});
    if (dt == DataType::Double) *t.data<double>() = v;
    else if (dt == DataType::Float16) *t.data<float16>() = float16(float(v));
    else if (dt == DataType::BFloat16) *t.data<bfloat16>() = bfloat16(float(v));
    else *t.data<float>() = float(v);
    g.add_initializer(c->name, t);
    return c;
  };
  auto node = [&](const char* op, std::vector<Value*> ins, const char* hint) {
    Value* o = g.add_unique_value(p + "/" + hint);
    g.add_node(op, std::move(ins), {o}, "", o->name);
    return o;
  };
  Value* x_size = node("Size", {bn->inputs[0]}, "x_size");
  Value* c_size = node("Size", {bn->inputs[1]}, "channels");
  Value* n = node("Div", {x_size, c_size}, "count");
  Value* nf = g.add_unique_value(p + "/count_float");
  g.add_node("Cast", {n}, {nf}, "", nf->name)->attrs["to"] =
      Attribute::of_int("to", static_cast<int64_t>(dt));
  Value* nm1 = node("Sub", {nf, scalar("one", 1.0)}, "count_minus_one");
  double momentum = bn->attr_float("momentum", 0.9f);
  Value* kept = node("Mul", {old, scalar("momentum", momentum)}, "kept");
  Value* fresh = node("Sub", {upd, kept}, "fresh");
  Value* corr = node("Div", {fresh, nm1}, "correction");
  return node("Add", {upd, corr}, "running_var");
}

}  // namespace

std::vector<std::pair<std::string, std::string>> set_training_mode(Graph& g, bool training,
                                                                   bool unbiased_running_var) {
  std::vector<std::pair<std::string, std::string>> updates;
  std::vector<Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (Node* n : nodes) {
    if (n->op_type == "Dropout" && canonical_domain(n->domain).empty()) {
      // A fresh constant rather than editing the old one: the exporter's flag may be shared.
      Value* on = g.add_unique_value(n->name + "/training_mode");
      g.add_initializer(on->name, Tensor::scalar<bool>(training));
      while (n->inputs.size() < 3) n->inputs.push_back(nullptr);
      g.set_input(n, 2, on);
    } else if (n->op_type == "BatchNormalization" && canonical_domain(n->domain).empty()) {
      ONYX_CHECK(n->num_inputs() == 5, "[autodiff] {} should have 5 inputs", n->label());
      n->attrs["training_mode"] = Attribute::of_int("training_mode", training ? 1 : 0);
      if (!training) {
        // Inference mode has one output; the running-statistics outputs of a model exported
        // in training mode are dangling there (the exporter updates the buffers in place).
        for (size_t i = 1; i < n->outputs.size(); ++i) {
          Value* o = n->outputs[i];
          if (!o) continue;
          bool used = !o->consumers.empty() ||
                      std::find(g.outputs.begin(), g.outputs.end(), o) != g.outputs.end();
          ONYX_CHECK(!used, "[autodiff] {}: output '{}' (running statistics) is read by the "
                     "model, so the node cannot run in inference mode", n->label(), o->name);
          o->producer = nullptr;
          o->producer_output = -1;
        }
        n->outputs.resize(1);
        continue;
      }
      n->outputs.resize(3, nullptr);
      for (int i = 1; i <= 2; ++i) {
        Value* stat = n->inputs[2 + i];
        ONYX_CHECK(g.is_initializer(stat), "[autodiff] {}: running statistics '{}' should be an "
                   "initializer", n->label(), stat->name);
        if (!n->outputs[i]) {
          Value* upd = g.add_unique_value(stat->name + "_updated");
          upd->producer = n;
          upd->producer_output = i;
          n->outputs[i] = upd;
        }
        make_overridable_input(g, stat);
        Value* upd = n->outputs[i];
        if (i == 2 && unbiased_running_var) upd = torch_running_var(g, n, stat, upd);
        updates.emplace_back(stat->name, upd->name);
      }
    }
  }
  if (!training) g.prune_values();
  return updates;
}

TrainingGraph build_training_graph(const Model& forward, const LossSpec& loss,
                                   const std::vector<std::string>& trainable,
                                   const RecomputeSpec& recompute) {
  TrainingGraph tg;
  tg.model = clone_model(forward);
  Model& m = *tg.model;
  Graph& g = *m.graph;
  prepare_for_training(m);
  for (Value* o : g.outputs) tg.forward_outputs.push_back(o->name);
  for (const auto& p : trainable) {
    Value* v = find_or_throw(g, p, "parameter");
    ONYX_CHECK(g.is_initializer(v), "[autodiff] '{}' is not an initializer, so it cannot be a "
               "trainable parameter", p);
    ONYX_CHECK(is_float(g.initializers.at(p).dtype()), "[autodiff] parameter '{}' is {}; only "
               "floating-point tensors can be trained", p, dtype_name(g.initializers.at(p).dtype()));
  }
  switch_to_training_mode(g, tg);
  LossNodes ln = append_loss(m, loss);
  if (ln.labels) tg.labels.push_back(ln.labels->name);
  infer_types_and_shapes(m);
  tg.params = trainable.empty() ? default_params(m, ln.loss) : trainable;
  ONYX_CHECK(!tg.params.empty(), "[autodiff] no trainable parameter reaches the loss");
  std::vector<Value*> wrt;
  for (const auto& p : tg.params) wrt.push_back(g.find_value(p));
  Value* seed = g.add_unique_value("loss_grad_seed");
  g.add_initializer(seed->name, zero_scalar(ln.loss->type.elem).reshape({}));
  {
    // add_initializer copied a zero; the seed is dL/dL = 1.
    Tensor one = g.initializers.at(seed->name).clone();
    DataType dt = one.dtype();
    if (dt == DataType::Double) *one.data<double>() = 1.0;
    else if (dt == DataType::Float16) *one.data<float16>() = float16(1.0f);
    else if (dt == DataType::BFloat16) *one.data<bfloat16>() = bfloat16(1.0f);
    else *one.data<float>() = 1.0f;
    g.initializers[seed->name] = one;
  }
  std::unordered_set<const Node*> forward_nodes;
  for (const auto& n : g.nodes()) forward_nodes.insert(n.get());
  // A graph input with 1 as its default: loss scaling feeds its scale here, so every
  // gradient comes out scaled without an extra node.
  make_overridable_input(g, seed);
  tg.loss_seed = seed->name;
  auto grads = differentiate(m, {{ln.loss, seed}}, wrt);
  tg.recompute = recompute_segments(m, forward_nodes, recompute);
  std::vector<Value*> fwd_outs = g.outputs;
  g.outputs.clear();
  tg.loss = named_output(g, ln.loss, "loss")->name;
  for (Value* w : wrt) {
    tg.grads.push_back(named_output(g, grads.at(w), w->name + "_grad")->name);
    make_overridable_input(g, w);
  }
  for (const auto& [in, upd] : tg.state_updates) g.outputs.push_back(g.find_value(upd));
  for (Value* o : fwd_outs) g.outputs.push_back(o);
  infer_types_and_shapes(m);
  return tg;
}

namespace {

/// The nodes of `order` on a path from the parameters to the seeds (as `r` tells) that cannot
/// be differentiated, looking inside the subgraphs of If and Loop nodes; `prefix` qualifies the
/// names of nodes inside subgraphs ("loop/body_node").
void find_missing(const std::vector<Node*>& order, const Reach& r, const std::string& prefix,
                  std::vector<MissingGradient>& out) {
  for (Node* n : order) {
    bool out_rel = std::any_of(n->outputs.begin(), n->outputs.end(),
                               [&](Value* o) { return o && r.rel.count(o); });
    if (!out_rel) continue;
    bool wanted = false;
    for (int i = 0; i < n->num_inputs(); ++i)
      wanted = wanted || (n->inputs[i] && r.rel.count(n->inputs[i]) && !non_differentiable_input(*n, i));
    std::set<std::string> implicit;
    for (Value* v : n->implicit_inputs)
      if (r.rel.count(v)) implicit.insert(v->name);
    if (!wanted && implicit.empty()) continue;
    const std::string name = prefix + n->name, dom = canonical_domain(n->domain);
    const bool control_flow = dom.empty() && (n->op_type == "If" || n->op_type == "Loop");
    if (!control_flow) {
      if (!gradient_rules().find(n->op_type) || !dom.empty())
        out.push_back({name, n->op_type, dom, implicit.empty() ? "no gradient rule"
                                                                : "no gradient rule (a subgraph reads a trained value)"});
      continue;
    }
    // If/Loop: what their subgraphs compute from the trained values must be differentiable.
    for (const auto& [an, a] : n->attrs) {
      if (!a.g) continue;
      Graph& sg = *a.g;
      std::vector<Value*> wrt;
      for (const auto& nm : implicit)
        if (Value* v = sg.find_value(nm)) wrt.push_back(v);
      if (n->op_type == "Loop")
        for (size_t i = 2; i < sg.inputs.size(); ++i) {
          const ValueType& t = sg.inputs[i]->type;
          if (!t.is_tensor())
            out.push_back({name, n->op_type, dom, fmt::format("loop-carried value '{}' is not a "
                                                              "tensor", sg.inputs[i]->name)});
          else if (is_float(t.elem))
            wrt.push_back(sg.inputs[i]);
        }
      std::map<Value*, Value*> seeds;
      for (Value* o : sg.outputs)
        if (o) seeds[o] = o;
      std::vector<Node*> inner = sg.topological_order();
      find_missing(inner, analyze(inner, seeds, wrt), name + "/", out);
    }
  }
}

}  // namespace

std::vector<MissingGradient> missing_gradients(const Model& forward) {
  auto m = clone_model(forward);
  prepare_for_training(*m);
  Graph& g = *m->graph;
  std::vector<Value*> cands;
  for (const auto& [name, t] : g.initializers)
    if (is_float(t.dtype())) cands.push_back(g.find_value(name));
  std::map<Value*, Value*> seeds;
  for (Value* o : g.outputs)
    if (o) seeds[o] = o;
  const std::vector<Node*> order = g.topological_order();
  std::vector<MissingGradient> out;
  find_missing(order, analyze(order, seeds, cands), "", out);
  return out;
}

std::unique_ptr<Model> build_eval_graph(const Model& forward, const LossSpec& loss,
                                        const std::vector<std::string>& params) {
  auto m = clone_model(forward);
  prepare_for_training(*m);
  Graph& g = *m->graph;
  std::vector<Value*> fwd_outs = g.outputs;
  LossNodes ln = append_loss(*m, loss);
  g.outputs.clear();
  named_output(g, ln.loss, "loss");
  for (Value* o : fwd_outs) g.outputs.push_back(o);
  for (const auto& p : params) make_overridable_input(g, find_or_throw(g, p, "parameter"));
  // Running statistics are fed too, so evaluation sees the ones training updated.
  for (const auto& n : g.nodes())
    if (n->op_type == "BatchNormalization" && n->num_inputs() == 5)
      for (int i = 3; i <= 4; ++i)
        if (g.is_initializer(n->inputs[i])) make_overridable_input(g, n->inputs[i]);
  infer_types_and_shapes(*m);
  return m;
}

BackwardGraphs build_backward_graphs(const Model& forward, const std::vector<std::string>& wrt_names) {
  BackwardGraphs bg;
  auto joint = clone_model(forward);
  prepare_for_training(*joint);
  Graph& g = *joint->graph;
  std::unordered_set<const Node*> fwd_nodes;
  for (const auto& n : g.nodes()) fwd_nodes.insert(n.get());
  std::vector<Value*> wrt;
  for (const auto& w : wrt_names) {
    Value* v = find_or_throw(g, w, "input or initializer");
    bool is_input = std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end();
    ONYX_CHECK(is_input || g.is_initializer(v), "[autodiff] '{}' is neither a graph input nor an "
               "initializer", w);
    ONYX_CHECK(v->type.is_tensor() && is_float(v->type.elem), "[autodiff] '{}' is {}; gradients "
               "exist only for floating-point tensors", w, v->type.str());
    wrt.push_back(v);
    bg.wrt.push_back(w);
  }
  std::map<Value*, Value*> seeds;
  std::vector<Value*> fwd_outs = g.outputs;
  std::vector<Value*> seed_vals;
  for (Value* o : fwd_outs) {
    Value* s = g.get_or_add_value(o->name + "_grad");
    ONYX_CHECK(!s->producer, "[autodiff] the name '{}' is taken", s->name);
    s->type = o->type;
    seeds[o] = s;
    seed_vals.push_back(s);
    bg.seeds.push_back(s->name);
  }
  auto grads = differentiate(*joint, seeds, wrt);
  std::vector<Value*> grad_outs;
  for (Value* w : wrt) {
    std::string want = w->name + "_grad";
    Value* dst = g.find_value(want) ? g.add_unique_value(want) : g.get_or_add_value(want);
    g.add_node("Identity", {grads.at(w)}, {dst}, "", dst->name + "/Identity");
    dst->type = w->type;
    grad_outs.push_back(dst);
  }
  // Split: the backward model holds the new nodes; whatever they read from the forward side
  // becomes a saved activation (or a copied constant).
  std::vector<const Node*> bwd_nodes;
  std::set<std::string> produced_bwd;
  for (const auto& n : g.nodes())
    if (!fwd_nodes.count(n.get())) {
      bwd_nodes.push_back(n.get());
      for (Value* o : n->outputs)
        if (o) produced_bwd.insert(o->name);
    }
  std::set<std::string> seed_names(bg.seeds.begin(), bg.seeds.end());
  std::set<std::string> wrt_set(bg.wrt.begin(), bg.wrt.end());
  auto bm = std::make_unique<Model>();
  bm->ir_version = joint->ir_version;
  bm->opsets = joint->opsets;
  bm->producer_name = "onyx autodiff";
  bm->graph = std::make_unique<Graph>(g.name + "_backward");
  Graph& b = *bm->graph;
  for (Value* s : seed_vals) {
    Value* v = b.get_or_add_value(s->name);
    v->type = s->type;
    b.inputs.push_back(v);
  }
  std::vector<std::string> saved, wrt_read;
  std::set<std::string> seen;
  // What a node reads: its inputs and what its subgraphs read from this graph.
  auto reads = [](const Node* n) {
    std::vector<Value*> r = n->inputs;
    r.insert(r.end(), n->implicit_inputs.begin(), n->implicit_inputs.end());
    return r;
  };
  for (const Node* n : bwd_nodes)
    for (Value* in : reads(n)) {
      if (!in || produced_bwd.count(in->name) || seed_names.count(in->name) || seen.count(in->name)) continue;
      seen.insert(in->name);
      if (wrt_set.count(in->name)) {
        wrt_read.push_back(in->name);
      } else if (g.is_initializer(in) && !in->producer) {
        b.add_initializer(in->name, g.initializers.at(in->name));
      } else {
        saved.push_back(in->name);
      }
    }
  for (const auto& names : {saved, wrt_read})
    for (const auto& nm : names) {
      Value* v = b.get_or_add_value(nm);
      v->type = g.find_value(nm)->type;
      b.inputs.push_back(v);
    }
  for (const Node* n : bwd_nodes) copy_node(b, *n);
  for (Value* go : grad_outs) {
    Value* v = b.find_value(go->name);
    b.outputs.push_back(v);
    bg.grads.push_back(go->name);
  }
  // The forward model: the joint graph without the backward nodes, plus the saved outputs.
  for (const Node* n : bwd_nodes) g.remove_node(const_cast<Node*>(n));
  for (Value* s : seed_vals) g.inputs.erase(std::remove(g.inputs.begin(), g.inputs.end(), s), g.inputs.end());
  for (const auto& nm : saved) {
    Value* v = g.find_value(nm);
    if (std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end()) g.outputs.push_back(v);
  }
  for (Value* w : wrt)
    if (g.is_initializer(w)) make_overridable_input(g, w);
  std::set<std::string> keep_inits;
  for (const auto& n : g.nodes())
    for (Value* v : reads(n.get()))
      if (v) keep_inits.insert(v->name);
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = keep_inits.count(it->first) || wrt_set.count(it->first) ? std::next(it) : g.initializers.erase(it);
  g.prune_values();
  bg.saved = saved;
  bg.forward = std::move(joint);
  bg.backward = std::move(bm);
  infer_types_and_shapes(*bg.backward);
  return bg;
}

}  // namespace onyx::autodiff
