// Gradient rules: control flow. Gradients flow through what ran: If's backward is an If on the
// same condition whose branches recompute their forward branch and differentiate it; Loop's
// backward is a Loop over the executed iterations in reverse (backpropagation through time)
// that recomputes each iteration from its loop-carried inputs, which the forward Loop now also
// stacks as extra scan outputs. Gradients of the outer values a body reads add up over the
// iterations; one read as Gather(v, iteration) gets its slices' gradients stacked instead.
#include <algorithm>
#include <climits>
#include <set>

#include "autodiff/gradient_rules.h"
#include "autodiff/subgraph.h"
#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

namespace {

/// Adds `s` to the seed of v (a Sum when v already has one: a value returned twice).
void add_seed(Emitter& e, std::map<Value*, Value*>& seeds, Value* v, Value* s) {
  auto [it, fresh] = seeds.emplace(v, s);
  if (!fresh) it->second = e.op("Add", {it->second, s});
}

/// Appends v to `g`'s outputs; through an Identity when v is not a node output of `g` (an
/// input, an outer value, a constant) or is already listed, so every output is its own value.
void add_output(Emitter& e, Value* v) {
  Graph& g = e.graph();
  if (!v->producer || v->producer->owner != &g ||
      std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end()) {
    ValueType t = v->type;
    v = e.op("Identity", {v});
    v->type = t;
  }
  g.outputs.push_back(v);
}

/// Copies the nodes of `fwd` into `into`, in topological order, with `fwd`'s constants.
std::vector<std::pair<const Node*, Node*>> copy_body(const Graph& fwd, Graph& into) {
  for (const auto& [name, t] : fwd.initializers) into.add_initializer(name, t);
  std::vector<std::pair<const Node*, Node*>> copies;
  for (const Node* n : fwd.topological_order()) copies.emplace_back(n, copy_node(into, *n));
  return copies;
}

// ---------------------------------------------------------------------------------------------
// If

// d If(c; then, else) = If(c; d then, d else), each branch giving the gradients of every outer
// value either branch reads with a gradient (zeros for those it does not read)
void if_grad(GradContext& c) {
  const Node& n = c.node();
  Graph& g = c.graph();
  const std::vector<Value*>& vs = c.implicit_wants();
  if (vs.empty()) return;
  std::vector<std::shared_ptr<Graph>> bwd;
  for (const char* br : {"then_branch", "else_branch"}) {
    const Graph& fwd = *n.require_attr(br, Attribute::Type::Graph).g;
    ONYX_CHECK(fwd.outputs.size() == n.outputs.size(), "{}: {} has {} outputs, the node {}",
               c.label(), br, fwd.outputs.size(), n.outputs.size());
    auto b = std::make_shared<Graph>(fmt::format("{}_grad_{}", n.name, br), &g);
    Emitter e(*b, fmt::format("{}_grad_{}", n.name, br));
    std::vector<Node*> order;
    for (const auto& [f, copy] : copy_body(fwd, *b)) order.push_back(copy);
    std::map<Value*, Value*> seeds;
    for (size_t i = 0; i < fwd.outputs.size(); ++i)
      if (Value* d = c.dout(static_cast<int>(i)))
        add_seed(e, seeds, b->get_or_add_value(fwd.outputs[i]->name), outer_ref(*b, d));
    std::vector<Value*> wrt;
    for (Value* v : vs) wrt.push_back(outer_ref(*b, v));
    infer_subgraph_types(c.model(), *b);
    auto grads = differentiate_nodes(c.model(), *b, order, seeds, wrt);
    for (Value* w : wrt) add_output(e, grads.at(w));
    bwd.push_back(b);
  }
  auto outs = c.op_n("If", {n.inputs.at(0)}, static_cast<int>(vs.size()),
                     {graph_attr("then_branch", bwd[0]), graph_attr("else_branch", bwd[1])});
  update_implicit_inputs(g, outs[0]->producer);
  for (size_t k = 0; k < vs.size(); ++k) {
    outs[k]->type = vs[k]->type;
    c.set_dimplicit(vs[k], outs[k]);
  }
}

// ---------------------------------------------------------------------------------------------
// Loop

/// True when `n` is Gather(v, iteration number) along axis 0 in a Loop body.
bool gathers_iteration(const Node& n, const Value* v, const Graph& body) {
  return n.op_type == "Gather" && n.domain.empty() && n.num_inputs() == 2 && n.inputs[0] == v &&
         n.inputs[1] == body.inputs[0] && n.attr_int("axis", 0) == 0;
}

/// How the body reads outer value `name`: only through Gather(v, iteration) (returns those
/// nodes), or otherwise (nullopt: its gradient is accumulated densely).
std::optional<std::vector<const Node*>> iteration_slices(const Graph& body, const std::string& name) {
  const Value* v = body.find_value(name);
  if (!v || std::find(body.outputs.begin(), body.outputs.end(), v) != body.outputs.end())
    return std::nullopt;
  std::vector<const Node*> gathers;
  for (const auto& [node, idx] : v->consumers) {
    if (idx < 0 || !gathers_iteration(*node, v, body)) return std::nullopt;
    gathers.push_back(node);
  }
  if (gathers.empty()) return std::nullopt;
  return gathers;
}

ValueType with_leading_dim(ValueType t) {
  if (t.is_tensor() && t.shape) t.shape->insert(t.shape->begin(), Dim{});
  return t;
}

// Backpropagation through time over the iterations that ran. Forward Loop inputs (M, cond,
// v_1..v_N), body (i, cond, v_1..v_N) -> (cond, v_1..v_N, scans). The forward Loop also stacks
// i and v_1..v_N as they enter each iteration; then, with T = the number of iterations run,
//   Loop(T; dv_1..dv_N, acc_1..):  t = T-1-k; v = saved[t]; recompute the body at (t, v);
//   differentiate it seeded with dv (the carried outputs) and dscans[t]; dv <- d v_in,
//   acc_j += d outer_j, and d slice_j (for an outer value read as Gather(x, i)) stacked.
void loop_grad(GradContext& c) {
  const Node& n = c.node();
  Graph& g = c.graph();
  Graph& body = *n.require_attr("body", Attribute::Type::Graph).g;
  const int N = std::max(0, n.num_inputs() - 2);
  ONYX_CHECK(static_cast<int>(body.inputs.size()) == N + 2 &&
                 static_cast<int>(body.outputs.size()) >= N + 1,
             "{}: its body takes {} inputs and returns {} outputs, but the node carries {} values",
             c.label(), body.inputs.size(), body.outputs.size(), N);
  const int K0 = static_cast<int>(body.outputs.size()) - 1 - N;
  // Carried values: tensors of a known dtype; float ones carry gradients.
  std::vector<ValueType> carried(N);
  std::vector<bool> diff(N);
  for (int i = 0; i < N; ++i) {
    ValueType t = body.inputs[2 + i]->type;
    if ((!t.is_tensor() || !t.shape) && n.has_input(2 + i)) t = n.inputs[2 + i]->type;
    ONYX_CHECK(t.is_tensor() && t.elem != DataType::Undefined,
               "{}: loop-carried value {} ('{}') is {}; gradients through Loop need loop-carried "
               "tensors of a known dtype",
               c.label(), i, body.inputs[2 + i]->name, t.kind == ValueType::Kind::Unknown ? "untyped" : t.str());
    // Each iteration's inputs are stacked, so a carried value must keep its shape.
    const ValueType& out = body.outputs[1 + i]->type;
    if (t.shape && out.is_tensor() && out.shape) {
      bool same = t.shape->size() == out.shape->size();
      for (size_t d = 0; same && d < t.shape->size(); ++d) {
        const Dim &a = (*t.shape)[d], &b = (*out.shape)[d];
        same = !(a.is_fixed() && b.is_fixed() && a.value != b.value);
      }
      ONYX_CHECK(same, "{}: loop-carried value {} ('{}') enters an iteration as {} and leaves it as "
                 "{}; gradients through Loop need loop-carried values that keep their shape",
                 c.label(), i, body.inputs[2 + i]->name, t.str(), out.str());
    }
    carried[i] = t;
    diff[i] = is_float(t.elem);
  }
  const std::string base = fmt::format("{}_grad", n.name.empty() ? "Loop" : n.name);
  // Outer values with a gradient: read per iteration as Gather(v, i), or anyhow (dense).
  std::vector<Value*> dense;
  std::vector<std::pair<Value*, std::vector<const Node*>>> sliced;
  for (Value* v : c.implicit_wants()) {
    if (auto s = iteration_slices(body, v->name)) sliced.emplace_back(v, *s);
    else dense.push_back(v);
  }

  // The forward Loop's extra scan outputs: i and v_1..v_N as each iteration starts.
  Value* saved_iter = c.ensure_out(N + K0);
  saved_iter->type = ValueType::tensor(DataType::Int64, SymShape{Dim{}});
  std::vector<Value*> saved(N);
  for (int i = 0; i < N; ++i) {
    saved[i] = c.ensure_out(N + K0 + 1 + i);
    saved[i]->type = with_leading_dim(carried[i]);
  }
  Value* T = c.op("Gather", {c.shape_of(saved_iter), c.int_scalar(0)});
  T->type = ValueType::tensor(DataType::Int64, SymShape{});
  Value* last = c.op("Sub", {T, c.int_scalar(1)});
  last->type = T->type;

  // The backward body.
  auto bb = std::make_shared<Graph>(base + "_body", &g);
  Emitter e(*bb, base + "_body");
  std::vector<Node*> order;
  std::set<const Node*> cut;
  for (const auto& [v, gathers] : sliced) cut.insert(gathers.begin(), gathers.end());
  std::map<const Node*, Node*> copy_of;
  for (const auto& [f, copy] : copy_body(body, *bb)) {
    copy_of[f] = copy;
    if (!cut.count(f)) order.push_back(copy);
  }
  auto same = [&](const Value* fwd_value) {
    Value* v = bb->get_or_add_value(fwd_value->name);
    if (v->type.kind == ValueType::Kind::Unknown) v->type = fwd_value->type;
    return v;
  };
  Value* k = e.input(base + "/k", ValueType::tensor(DataType::Int64, SymShape{}));
  Value* cond = e.input(base + "/cond", ValueType::tensor(DataType::Bool, SymShape{}));
  std::vector<Value*> dv_in(N, nullptr), acc_in;
  for (int i = 0; i < N; ++i)
    if (diff[i]) dv_in[i] = e.input(body.inputs[2 + i]->name + "_grad", carried[i]);
  for (Value* v : dense) acc_in.push_back(e.input(v->name + "_grad", v->type));
  // Iteration t's inputs, under the forward body's names.
  Value* t = e.op("Sub", {outer_ref(*bb, last), k});
  e.op_named(body.inputs[0]->name, "Identity", {t})->type = body.inputs[0]->type;
  e.op_named(body.inputs[1]->name, "Identity", {cond})->type = body.inputs[1]->type;
  std::vector<Value*> v_in(N);
  for (int i = 0; i < N; ++i) {
    v_in[i] = e.op_named(body.inputs[2 + i]->name, "Gather", {outer_ref(*bb, saved[i]), t});
    v_in[i]->type = carried[i];
  }
  std::map<Value*, Value*> seeds;
  for (int i = 0; i < N; ++i)
    if (diff[i]) add_seed(e, seeds, same(body.outputs[1 + i]), dv_in[i]);
  for (int j = 0; j < K0; ++j)
    if (Value* d = c.dout(N + j))
      add_seed(e, seeds, same(body.outputs[1 + N + j]), e.op("Gather", {outer_ref(*bb, d), t}));
  std::vector<Value*> wrt;
  for (int i = 0; i < N; ++i)
    if (diff[i]) wrt.push_back(v_in[i]);
  std::vector<Value*> dense_refs;
  for (Value* v : dense) dense_refs.push_back(outer_ref(*bb, v));
  wrt.insert(wrt.end(), dense_refs.begin(), dense_refs.end());
  std::vector<Value*> slices;
  for (const auto& [v, gathers] : sliced)
    for (const Node* gn : gathers) slices.push_back(copy_of.at(gn)->outputs[0]);
  wrt.insert(wrt.end(), slices.begin(), slices.end());
  infer_subgraph_types(c.model(), *bb);
  auto grads = differentiate_nodes(c.model(), *bb, order, seeds, wrt);
  add_output(e, cond);
  for (int i = 0; i < N; ++i)
    if (diff[i]) add_output(e, grads.at(v_in[i]));
  for (size_t j = 0; j < dense.size(); ++j) {
    Value* sum = e.op("Add", {acc_in[j], grads.at(dense_refs[j])});
    sum->type = dense[j]->type;
    add_output(e, sum);
  }
  for (Value* s : slices) add_output(e, grads.at(s));

  // Make the forward Loop save what the backward body reads.
  {
    Emitter fe(body, base + "_save");
    Value* si = fe.op("Identity", {body.inputs[0]});
    si->type = body.inputs[0]->type;
    body.outputs.push_back(si);
    for (int i = 0; i < N; ++i) {
      Value* sv = fe.op("Identity", {body.inputs[2 + i]});
      sv->type = body.inputs[2 + i]->type;
      body.outputs.push_back(sv);
    }
  }

  // The backward Loop: T iterations carrying dv and the accumulators.
  std::vector<Value*> ins = {T, nullptr};
  for (int i = 0; i < N; ++i) {
    if (!diff[i]) continue;
    Value* d = c.dout(i);
    if (!d) {
      Value* init = n.inputs.at(2 + i);
      d = c.op("Expand", {c.scalar(0.0, init), c.shape_of(init)});
      d->type = init->type;
    }
    ins.push_back(d);
  }
  for (Value* v : dense) {
    Value* z = c.op("Expand", {c.scalar(0.0, v), c.shape_of(v)});
    z->type = v->type;
    ins.push_back(z);
  }
  const int n_dv = static_cast<int>(std::count(diff.begin(), diff.end(), true));
  auto outs = c.op_n("Loop", ins, n_dv + static_cast<int>(dense.size() + slices.size()),
                     {graph_attr("body", bb)});
  update_implicit_inputs(g, outs[0]->producer);
  int o = 0;
  for (int i = 0; i < N; ++i) {
    if (!diff[i]) continue;
    outs[o]->type = carried[i];
    if (c.wants(2 + i)) c.set_din(2 + i, outs[o]);
    ++o;
  }
  std::map<Value*, std::vector<Value*>> parts;
  for (Value* v : dense) {
    outs[o]->type = v->type;
    parts[v].push_back(outs[o++]);
  }
  // Stacked slice gradients: backward order, T rows; reversed and zero-padded to v's length.
  for (const auto& [v, gathers] : sliced) {
    Value* shape = c.shape_of(v);
    Value* rest = c.op("Slice", {shape, c.ints({1}), c.ints({INT64_MAX})});
    Value* T1 = c.op("Unsqueeze", {T, c.ints({0})});
    Value* zeros = c.op("Expand", {c.scalar(0.0, v),
                                   c.op("Concat", {c.op("Sub", {c.op("Slice", {shape, c.ints({0}), c.ints({1})}), T1}), rest},
                                        {Attribute::of_int("axis", 0)})});
    for (size_t q = 0; q < gathers.size(); ++q) {
      Value* rows = c.op("Reshape", {outs[o++], c.op("Concat", {T1, rest}, {Attribute::of_int("axis", 0)})});
      Value* fwd_order = c.op("Slice", {rows, c.ints({-1}), c.ints({INT64_MIN}), c.ints({0}), c.ints({-1})});
      Value* full = c.op("Concat", {fwd_order, zeros}, {Attribute::of_int("axis", 0)});
      full->type = v->type;
      parts[v].push_back(full);
    }
  }
  for (Value* v : c.implicit_wants()) {
    auto& p = parts.at(v);
    Value* total = p.size() == 1 ? p[0] : c.op("Sum", p);
    total->type = v->type;
    c.set_dimplicit(v, total);
  }
}

}  // namespace

void add_control_flow_rules(RuleTable& t) {
  t.add("If", if_grad);
  t.add("Loop", loop_grad);
}

}  // namespace onyx::autodiff
