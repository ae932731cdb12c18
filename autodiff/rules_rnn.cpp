// Gradient rules: RNN, GRU and LSTM. The rule re-expresses the node in plain ops as the CPU kernel
// computes it (the CPU provider's rnn.cpp): one MatMul projects every step's input, a Loop over
// time runs one cell step per iteration (sequence_lens masks finished rows: their state holds,
// their Y rows are 0), ReverseSequence serves the reverse direction, and Split/Concat/Transpose
// handle directions and layouts. It then differentiates that expansion, so the recurrence's
// backward is the Loop rule's backpropagation through time over the run-time sequence length.
// The forward pass still runs the fused kernel; the backward recomputes the expansion.
#include <cctype>

#include "autodiff/gradient_rules.h"
#include "autodiff/subgraph.h"
#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx::autodiff {

namespace {

enum class Cell { RNN, GRU, LSTM };

/// One activation of the RNN family: name (lower case) with its alpha and beta.
struct Activation {
  std::string kind;
  float alpha = 0, beta = 0;
};

/// The node's activations for all directions, alphas and betas taken in order by the functions
/// that use them (as the kernel parses them).
std::vector<Activation> activations(const GradContext& c, Cell cell, int dirs) {
  static const std::vector<std::string> rnn_def{"Tanh"}, gru_def{"Sigmoid", "Tanh"},
      lstm_def{"Sigmoid", "Tanh", "Tanh"};
  const auto& def = cell == Cell::RNN ? rnn_def : cell == Cell::GRU ? gru_def : lstm_def;
  std::vector<std::string> names = c.node().attr_strings("activations", {});
  if (names.empty())
    for (int d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  if (names.size() == def.size() && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  ONYX_CHECK(names.size() == def.size() * dirs, "{}: activations should list {} functions but lists {}",
             c.label(), def.size() * dirs, names.size());
  const std::vector<float> alphas = c.node().attr_floats("activation_alpha", {});
  const std::vector<float> betas = c.node().attr_floats("activation_beta", {});
  struct Spec {
    const char* name;
    bool alpha, beta;
    float da, db;
  };
  static const Spec specs[] = {
      {"relu", false, false, 0, 0},       {"tanh", false, false, 0, 0},
      {"sigmoid", false, false, 0, 0},    {"affine", true, true, 1.f, 0.f},
      {"leakyrelu", true, false, 0.01f, 0}, {"thresholdedrelu", true, false, 1.f, 0},
      {"scaledtanh", true, true, 1.f, 1.f}, {"hardsigmoid", true, true, 0.2f, 0.5f},
      {"elu", true, false, 1.f, 0},       {"softsign", false, false, 0, 0},
      {"softplus", false, false, 0, 0},
  };
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const std::string& n : names) {
    std::string lower = n;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const Spec* s = nullptr;
    for (const Spec& sp : specs)
      if (lower == sp.name) s = &sp;
    ONYX_CHECK(s, "{}: unknown activation function '{}'", c.label(), n);
    Activation a{lower, s->da, s->db};
    if (s->alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (s->beta && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

/// Emits f(x) for one activation.
Value* activate(Emitter& e, const Activation& a, Value* x, DataType dt) {
  const std::string& k = a.kind;
  if (k == "relu") return e.op("Relu", {x});
  if (k == "tanh") return e.op("Tanh", {x});
  if (k == "sigmoid") return e.op("Sigmoid", {x});
  if (k == "affine") return e.op("Add", {e.op("Mul", {x, e.scalar(a.alpha, dt)}), e.scalar(a.beta, dt)});
  if (k == "leakyrelu") return e.op("LeakyRelu", {x}, {Attribute::of_float("alpha", a.alpha)});
  if (k == "thresholdedrelu")
    return e.op("ThresholdedRelu", {x}, {Attribute::of_float("alpha", a.alpha)});
  if (k == "scaledtanh")
    return e.op("Mul", {e.scalar(a.alpha, dt), e.op("Tanh", {e.op("Mul", {x, e.scalar(a.beta, dt)})})});
  if (k == "hardsigmoid")
    return e.op("HardSigmoid", {x}, {Attribute::of_float("alpha", a.alpha), Attribute::of_float("beta", a.beta)});
  if (k == "elu") return e.op("Elu", {x}, {Attribute::of_float("alpha", a.alpha)});
  if (k == "softsign") return e.op("Softsign", {x});
  return e.op("Softplus", {x});
}

/// What the cell body reads from the enclosing graph for one direction.
struct DirParams {
  Value* xw = nullptr;     // [S, B, G*H]: X W^T + Wb, in this direction's step order
  Value* rt = nullptr;     // [H, G*H] (GRU without linear_before_reset: the z and r gates)
  Value* rt_h = nullptr;   // GRU without linear_before_reset: [H, H] of the h gate
  Value* rb = nullptr;     // recurrent bias of the gates in rt (nullptr: none)
  Value* rb_h = nullptr;   // GRU without linear_before_reset: the h gate's
  Value* peep[3] = {};     // LSTM peepholes i, o, f ([H] each)
  Value* mask = nullptr;   // [S, B, 1] bool: step < sequence length (nullptr: all run)
};

struct Setup {
  Cell cell;
  DataType dt;
  int64_t H;
  Dim B;
  std::optional<float> clip;
  bool lbr = false, input_forget = false;
  const Activation* act = nullptr;  // this direction's (f, g, h)
};

/// One time step as a Loop body: (t, cond, h[, c]) -> (cond, h'[, c'], y), y = h' (0 past a
/// row's length).
std::shared_ptr<Graph> cell_body(GradContext& c, const Setup& s, const DirParams& p, int dir) {
  const Node& n = c.node();
  auto body = std::make_shared<Graph>(fmt::format("{}_grad_cell{}", n.name, dir), &c.graph());
  Emitter e(*body, fmt::format("{}_grad_cell{}", n.name, dir));
  const DataType dt = s.dt;
  const int64_t H = s.H;
  const ValueType state = ValueType::tensor(dt, SymShape{s.B, Dim::fixed(H)});
  Value* it = e.input("t", ValueType::tensor(DataType::Int64, SymShape{}));
  Value* cond = e.input("cond", ValueType::tensor(DataType::Bool, SymShape{}));
  Value* h = e.input("h", state);
  Value* cs = s.cell == Cell::LSTM ? e.input("c", state) : nullptr;
  auto ref = [&](Value* v) { return v ? outer_ref(*body, v) : nullptr; };
  auto clip = [&](Value* v) {
    if (!s.clip) return v;
    return e.op("Clip", {v, e.scalar(-*s.clip, dt), e.scalar(*s.clip, dt)});
  };
  auto plus = [&](Value* a, Value* b) { return b ? e.op("Add", {a, b}) : a; };
  auto split = [&](Value* v, int parts) {
    return e.op_n("Split", {v, e.ints(std::vector<int64_t>(parts, H))}, parts, {Attribute::of_int("axis", 1)});
  };
  const Activation* f = s.act;
  Value* gx = e.op("Gather", {ref(p.xw), it});
  Value* q = plus(e.op("MatMul", {h, ref(p.rt)}), ref(p.rb));
  Value *h_new = nullptr, *c_new = nullptr;
  if (s.cell == Cell::RNN) {
    h_new = activate(e, f[0], clip(e.op("Add", {gx, q})), dt);
  } else if (s.cell == Cell::GRU) {
    auto g3 = split(gx, 3);
    auto qs = split(q, s.lbr ? 3 : 2);
    Value* z = activate(e, f[0], clip(e.op("Add", {g3[0], qs[0]})), dt);
    Value* r = activate(e, f[0], clip(e.op("Add", {g3[1], qs[1]})), dt);
    Value* qh = s.lbr ? e.op("Mul", {r, qs[2]})
                      : plus(e.op("MatMul", {e.op("Mul", {r, h}), ref(p.rt_h)}), ref(p.rb_h));
    Value* ht = activate(e, f[1], clip(e.op("Add", {g3[2], qh})), dt);
    h_new = e.op("Add", {ht, e.op("Mul", {z, e.op("Sub", {h, ht})})});  // (1-z) ht + z h
  } else {
    auto g4 = split(e.op("Add", {gx, q}), 4);  // gates i, o, f, c
    auto peep = [&](Value* pre, int k, Value* state_v) {
      return p.peep[k] ? e.op("Add", {pre, e.op("Mul", {ref(p.peep[k]), state_v})}) : pre;
    };
    Value* i = activate(e, f[0], clip(peep(g4[0], 0, cs)), dt);
    Value* fg = s.input_forget ? e.op("Sub", {e.scalar(1.0, dt), i})
                               : activate(e, f[0], clip(peep(g4[2], 2, cs)), dt);
    Value* cc = activate(e, f[1], clip(g4[3]), dt);
    c_new = e.op("Add", {e.op("Mul", {fg, cs}), e.op("Mul", {i, cc})});
    Value* o = activate(e, f[0], clip(peep(g4[1], 1, c_new)), dt);
    h_new = e.op("Mul", {o, activate(e, f[2], c_new, dt)});
  }
  Value *h_out = h_new, *c_out = c_new, *y = nullptr;
  if (p.mask) {
    Value* m = e.op("Gather", {ref(p.mask), it});
    h_out = e.op("Where", {m, h_new, h});
    if (cs) c_out = e.op("Where", {m, c_new, cs});
    y = e.op("Where", {m, h_new, e.scalar(0.0, dt)});
  } else {
    y = e.op("Identity", {h_new});
  }
  body->outputs.push_back(e.op("Identity", {cond}));
  body->outputs.push_back(h_out);
  if (cs) body->outputs.push_back(c_out);
  body->outputs.push_back(y);
  for (Value* v : {h_out, c_out, y})
    if (v) v->type = state;
  infer_subgraph_types(c.model(), *body);
  return body;
}

Value* typed(Value* v, DataType dt, SymShape s) {
  v->type = ValueType::tensor(dt, std::move(s));
  return v;
}

// d RNN/GRU/LSTM = the gradient of its expansion into MatMul + Loop (see the file comment), for
// X, W, R, B, initial_h, initial_c and P.
void recurrent_grad(GradContext& c, Cell cell) {
  const Node& n = c.node();
  Graph& g = c.graph();
  const DataType dt = c.dtype(c.in(0));
  const int64_t G = cell == Cell::RNN ? 1 : cell == Cell::GRU ? 3 : 4;
  const std::string direction = n.attr_string("direction", "forward");
  ONYX_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional",
             "{}: direction should be forward, reverse or bidirectional but is '{}'", c.label(), direction);
  const int D = direction == "bidirectional" ? 2 : 1;
  const bool layout = n.attr_int("layout", 0) != 0;
  int64_t H = n.attr_int("hidden_size", 0);
  if (H <= 0 && c.rank(c.in(2)) == 3 && (*c.sym_shape(c.in(2)))[2].is_fixed())
    H = (*c.sym_shape(c.in(2)))[2].value;
  ONYX_CHECK(H > 0, "{}: its gradient needs the hidden size, from hidden_size or R's static shape",
             c.label());
  const int64_t GH = G * H;
  Setup s{cell, dt, H, Dim{}, std::nullopt};
  if (n.has_attr("clip")) s.clip = n.attr_float("clip", 0.f);
  s.lbr = cell == Cell::GRU && n.attr_int("linear_before_reset", 0) != 0;
  s.input_forget = cell == Cell::LSTM && n.attr_int("input_forget", 0) != 0;
  const std::vector<Activation> acts = activations(c, cell, D);
  const size_t per = acts.size() / D;

  // Ports: an Identity per float input, so each gets its own gradient even when two inputs are
  // the same value.
  const std::vector<int> float_inputs =
      cell == Cell::LSTM ? std::vector<int>{0, 1, 2, 3, 5, 6, 7} : std::vector<int>{0, 1, 2, 3, 5};
  std::map<int, Value*> port;
  for (int i : float_inputs)
    if (c.in(i)) {
      port[i] = c.op("Identity", {c.in(i)});
      port[i]->type = c.in(i)->type;
    }
  const size_t first = g.num_nodes();

  // X as [S, B, I].
  SymShape xs = c.rank(c.in(0)) == 3 ? *c.sym_shape(c.in(0)) : SymShape(3, Dim{});
  if (layout) std::swap(xs[0], xs[1]);
  const Dim Sd = xs[0];
  s.B = xs[1];
  if (c.rank(c.in(0)) != 3) port[0]->type = ValueType::tensor(dt, SymShape(3, Dim{}));
  Value* X = layout ? typed(c.op("Transpose", {port[0]}, {Attribute::of_ints("perm", {1, 0, 2})}), dt, xs)
                    : port[0];
  auto i64 = [](Value* v, SymShape sh) {
    v->type = ValueType::tensor(DataType::Int64, std::move(sh));
    return v;
  };
  Value* shape = i64(c.shape_of(X), {Dim::fixed(3)});
  Value* S = i64(c.op("Gather", {shape, c.int_scalar(0)}), {});
  Value* B1 = i64(c.op("Slice", {shape, c.ints({1}), c.ints({2})}), {Dim::fixed(1)});
  Value* lens = nullptr;
  DirParams common;
  if (c.in(4)) {
    lens = i64(c.op("Cast", {c.in(4)}, {Attribute::of_int("to", static_cast<int64_t>(DataType::Int64))}), {s.B});
    Value* steps = c.op("Unsqueeze", {c.op("Range", {c.int_scalar(0), S, c.int_scalar(1)}), c.ints({1})});
    common.mask = c.op("Unsqueeze", {c.op("Less", {steps, c.op("Unsqueeze", {lens, c.ints({0})})}), c.ints({2})});
    common.mask->type = ValueType::tensor(DataType::Bool, SymShape{Sd, s.B, Dim::fixed(1)});
  }
  Value* full_lens = lens ? lens : i64(c.op("Expand", {S, B1}), {s.B});
  // Per-direction slices of a [D, ...] input (axis: where D sits), with that axis dropped.
  auto per_dir = [&](int i, int axis, SymShape rest) {
    std::vector<Value*> out;
    if (!port.count(i)) return std::vector<Value*>(D, nullptr);
    std::vector<Value*> parts = D == 1 ? std::vector<Value*>{port[i]}
                                       : c.op_n("Split", {port[i], c.ints({1, 1})}, 2,
                                                {Attribute::of_int("axis", axis)});
    for (Value* p : parts) out.push_back(typed(c.op("Squeeze", {p, c.ints({axis})}), dt, rest));
    return out;
  };
  const Dim I = xs[2], HD = Dim::fixed(H);
  auto Ws = per_dir(1, 0, {Dim::fixed(GH), I});
  auto Rs = per_dir(2, 0, {Dim::fixed(GH), HD});
  auto Bs = per_dir(3, 0, {Dim::fixed(2 * GH)});
  auto H0 = per_dir(5, layout ? 1 : 0, {s.B, HD});
  auto C0 = per_dir(6, layout ? 1 : 0, {s.B, HD});
  auto Ps = per_dir(7, 0, {Dim::fixed(3 * H)});
  Value* zeros = nullptr;  // [B, H] initial state when none is given
  auto slice = [&](Value* v, int64_t from, int64_t to, int64_t axis, SymShape sh) {
    return typed(c.op("Slice", {v, c.ints({from}), c.ints({to}), c.ints({axis})}), dt, std::move(sh));
  };

  std::vector<Value*> ys, hs, cs;
  for (int d = 0; d < D; ++d) {
    const bool rev = direction == "reverse" || d == 1;
    DirParams p = common;
    Value* wt = typed(c.op("Transpose", {Ws[d]}), dt, {I, Dim::fixed(GH)});
    p.xw = typed(c.op("MatMul", {X, wt}), dt, {Sd, s.B, Dim::fixed(GH)});
    Value* rb = nullptr;
    if (Bs[d]) {
      p.xw = typed(c.op("Add", {p.xw, slice(Bs[d], 0, GH, 0, {Dim::fixed(GH)})}), dt, {Sd, s.B, Dim::fixed(GH)});
      rb = slice(Bs[d], GH, 2 * GH, 0, {Dim::fixed(GH)});
    }
    if (rev)
      p.xw = typed(c.op("ReverseSequence", {p.xw, full_lens},
                        {Attribute::of_int("batch_axis", 1), Attribute::of_int("time_axis", 0)}),
                   dt, {Sd, s.B, Dim::fixed(GH)});
    Value* rt = typed(c.op("Transpose", {Rs[d]}), dt, {HD, Dim::fixed(GH)});
    if (cell == Cell::GRU && !s.lbr) {
      p.rt = slice(rt, 0, 2 * H, 1, {HD, Dim::fixed(2 * H)});
      p.rt_h = slice(rt, 2 * H, 3 * H, 1, {HD, HD});
      if (rb) {
        p.rb = slice(rb, 0, 2 * H, 0, {Dim::fixed(2 * H)});
        p.rb_h = slice(rb, 2 * H, 3 * H, 0, {HD});
      }
    } else {
      p.rt = rt;
      p.rb = rb;
    }
    if (Ps[d])
      for (int k = 0; k < 3; ++k) p.peep[k] = slice(Ps[d], k * H, (k + 1) * H, 0, {HD});
    auto init = [&](Value* given) {
      if (given) return given;
      if (!zeros)
        zeros = typed(c.op("Expand", {c.scalar(0.0, c.in(0)), c.op("Concat", {B1, c.ints({H})},
                                                                  {Attribute::of_int("axis", 0)})}),
                      dt, {s.B, HD});
      return zeros;
    };
    s.act = acts.data() + d * per;
    auto body = cell_body(c, s, p, d);
    std::vector<Value*> ins = {S, nullptr, init(H0[d])};
    if (cell == Cell::LSTM) ins.push_back(init(C0[d]));
    auto outs = c.op_n("Loop", ins, cell == Cell::LSTM ? 3 : 2, {graph_attr("body", body)});
    update_implicit_inputs(g, outs[0]->producer);
    for (Value* o : outs) typed(o, dt, {s.B, HD});
    Value* y = typed(outs.back(), dt, {Sd, s.B, HD});
    if (rev)
      y = typed(c.op("ReverseSequence", {y, full_lens},
                     {Attribute::of_int("batch_axis", 1), Attribute::of_int("time_axis", 0)}),
                dt, {Sd, s.B, HD});
    ys.push_back(typed(c.op("Unsqueeze", {y, c.ints({1})}), dt, {Sd, Dim::fixed(1), s.B, HD}));
    hs.push_back(typed(c.op("Unsqueeze", {outs[0], c.ints({0})}), dt, {Dim::fixed(1), s.B, HD}));
    if (cell == Cell::LSTM)
      cs.push_back(typed(c.op("Unsqueeze", {outs[1], c.ints({0})}), dt, {Dim::fixed(1), s.B, HD}));
  }
  const Dim DD = Dim::fixed(D);
  auto join = [&](std::vector<Value*>& parts, int axis, SymShape sh) {
    Value* v = parts.size() == 1 ? parts[0] : typed(c.op("Concat", parts, {Attribute::of_int("axis", axis)}), dt, sh);
    return v;
  };
  Value* Y = join(ys, 1, {Sd, DD, s.B, HD});
  if (layout) Y = typed(c.op("Transpose", {Y}, {Attribute::of_ints("perm", {2, 0, 1, 3})}), dt, {s.B, Sd, DD, HD});
  auto state_out = [&](std::vector<Value*>& parts) {
    Value* v = join(parts, 0, {DD, s.B, HD});
    if (layout) v = typed(c.op("Transpose", {v}, {Attribute::of_ints("perm", {1, 0, 2})}), dt, {s.B, DD, HD});
    return v;
  };
  Value* Yh = state_out(hs);
  Value* Yc = cell == Cell::LSTM ? state_out(cs) : nullptr;

  std::vector<Node*> order;
  for (size_t i = first; i < g.num_nodes(); ++i) order.push_back(g.nodes()[i].get());
  std::map<Value*, Value*> seeds;
  Value* expansion_outs[3] = {Y, Yh, Yc};
  for (int o = 0; o < 3; ++o)
    if (c.dout(o) && expansion_outs[o]) seeds[expansion_outs[o]] = c.dout(o);
  std::vector<Value*> wrt;
  for (const auto& [i, v] : port)
    if (c.wants(i)) wrt.push_back(v);
  auto grads = differentiate_nodes(c.model(), g, order, seeds, wrt);
  for (const auto& [i, v] : port)
    if (c.wants(i)) c.set_din(i, grads.at(v));
}

}  // namespace

void add_rnn_rules(RuleTable& t) {
  t.add("RNN", [](GradContext& c) { recurrent_grad(c, Cell::RNN); });
  t.add("GRU", [](GradContext& c) { recurrent_grad(c, Cell::GRU); });
  t.add("LSTM", [](GradContext& c) { recurrent_grad(c, Cell::LSTM); });
}

}  // namespace onyx::autodiff
