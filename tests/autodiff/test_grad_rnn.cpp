// Finite-difference checks of the recurrent gradient rules (float64): "RNN", "GRU" and "LSTM" in
// every direction, with and without bias, initial states, sequence_lens and peepholes, both
// layouts, clip, input_forget, GRU's linear_before_reset and non-default activations; gradients
// for X, W, R, B, initial_h, initial_c and P with Y, Y_h and Y_c in the loss.
#include "grad_check.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

constexpr int64_t S = 3, B = 2, I = 3, H = 2;

struct Rnn {
  std::string op;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, h0 = false, c0 = false, peepholes = false;
  std::vector<double> lens;  // empty: no sequence_lens
  std::vector<Attribute> attrs;
  std::vector<int> loss;  // empty: every output
};

Attribute strings(const std::string& name, std::vector<std::string> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Strings;
  a.strings = std::move(v);
  return a;
}

GradCase rnn_case(const Rnn& r) {
  const int64_t G = r.op == "RNN" ? 1 : r.op == "GRU" ? 3 : 4;
  const int64_t D = r.direction == "bidirectional" ? 2 : 1;
  const bool lstm = r.op == "LSTM";
  const Shape state = r.layout ? Shape{B, D, H} : Shape{D, B, H};
  GradCase gc{.op = r.op};
  gc.inputs = {P("X", r.layout ? Shape{B, S, I} : Shape{S, B, I}), P("W", {D, G * H, I}),
               P("R", {D, G * H, H})};
  gc.inputs.push_back(r.bias ? P("B", {D, 2 * G * H}) : None());
  gc.inputs.push_back(r.lens.empty() ? None() : C("lens", {B}, r.lens, DataType::Int32));
  gc.inputs.push_back(r.h0 ? P("h0", state) : None());
  if (lstm) {
    gc.inputs.push_back(r.c0 ? P("c0", state) : None());
    gc.inputs.push_back(r.peepholes ? P("P", {D, 3 * H}) : None());
  }
  while (gc.inputs.back().omitted) gc.inputs.pop_back();
  gc.attrs = {attr_int("hidden_size", H), attr_string("direction", r.direction),
              attr_int("layout", r.layout)};
  gc.attrs.insert(gc.attrs.end(), r.attrs.begin(), r.attrs.end());
  gc.outputs = lstm ? 3 : 2;
  gc.loss_outputs = r.loss.empty() ? (lstm ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1}) : r.loss;
  return gc;
}

void check(const Rnn& r) {
  SCOPED_TRACE(fmt::format("{} {} layout={} bias={} h0={} c0={} P={} lens={}", r.op, r.direction,
                           r.layout, r.bias, r.h0, r.c0, r.peepholes, r.lens.size()));
  check_gradient(rnn_case(r));
}

const char* kDirections[] = {"forward", "reverse", "bidirectional"};

}  // namespace

TEST(GradRnn, LSTMDirectionsAndInitialStates) {
  for (const char* dir : kDirections) {
    check({.op = "LSTM", .direction = dir, .bias = false});
    check({.op = "LSTM", .direction = dir, .h0 = true, .c0 = true});
  }
  check({.op = "LSTM", .h0 = true});
  check({.op = "LSTM", .c0 = true});
}

TEST(GradRnn, LSTMSequenceLengthsAndLayout) {
  for (const char* dir : kDirections)
    for (int64_t layout : {0, 1}) {
      check({.op = "LSTM", .direction = dir, .layout = layout, .h0 = true, .c0 = true, .lens = {3, 1}});
      check({.op = "LSTM", .direction = dir, .layout = layout, .lens = {2, 0}});
    }
}

TEST(GradRnn, LSTMPeepholesClipInputForgetActivations) {
  for (const char* dir : kDirections)
    check({.op = "LSTM", .direction = dir, .h0 = true, .c0 = true, .peepholes = true, .lens = {2, 3}});
  check({.op = "LSTM", .peepholes = true, .attrs = {attr_int("input_forget", 1)}});
  check({.op = "LSTM", .h0 = true, .attrs = {attr_float("clip", 0.6)}});
  check({.op = "LSTM",
         .direction = "bidirectional",
         .attrs = {strings("activations", {"HardSigmoid", "Elu", "ScaledTanh", "Sigmoid", "Softsign", "Tanh"}),
                   attr_floats("activation_alpha", {0.3f, 0.8f, 1.5f}),
                   attr_floats("activation_beta", {0.4f, 0.7f})}});
}

// Each output alone in the loss.
TEST(GradRnn, LSTMEachOutput) {
  for (int o : {0, 1, 2})
    check({.op = "LSTM", .direction = "bidirectional", .h0 = true, .c0 = true, .lens = {1, 3}, .loss = {o}});
}

TEST(GradRnn, GRU) {
  for (int64_t lbr : {0, 1})
    for (const char* dir : kDirections) {
      check({.op = "GRU", .direction = dir, .attrs = {attr_int("linear_before_reset", lbr)}});
      check({.op = "GRU", .direction = dir, .layout = 1, .bias = false, .h0 = true, .lens = {3, 2},
             .attrs = {attr_int("linear_before_reset", lbr)}});
    }
  check({.op = "GRU", .h0 = true, .lens = {0, 2}, .loss = {1}});
  check({.op = "GRU", .attrs = {attr_float("clip", 0.5)}});
  check({.op = "GRU",
         .direction = "bidirectional",
         .h0 = true,
         .attrs = {strings("activations", {"Sigmoid", "Softsign", "HardSigmoid", "LeakyRelu"}),
                   attr_floats("activation_alpha", {0.25f, 0.1f}), attr_floats("activation_beta", {0.45f}),
                   attr_int("linear_before_reset", 1)}});
}

TEST(GradRnn, RNN) {
  for (const char* dir : kDirections) {
    check({.op = "RNN", .direction = dir});
    check({.op = "RNN", .direction = dir, .layout = 1, .h0 = true, .lens = {1, 3}});
  }
  check({.op = "RNN", .bias = false, .loss = {0}});
  check({.op = "RNN", .h0 = true, .attrs = {attr_float("clip", 0.4)}});
  check({.op = "RNN", .direction = "bidirectional",
         .attrs = {strings("activations", {"Affine", "Softplus"}), attr_floats("activation_alpha", {0.7f}),
                   attr_floats("activation_beta", {0.2f})}});
  check({.op = "RNN", .attrs = {strings("activations", {"Relu"})}});
}

// The same value as initial_h and initial_c gets both gradients; X whose shape inference cannot
// tell (a Pad with run-time pads in front) still works: the sequence length is a run-time value.
TEST(GradRnn, SharedInitialStateAndUnknownShapes) {
  check_gradient({.op = "LSTM",
                  .inputs = {P("X", {S, B, I}), P("W", {1, 4 * H, I}), P("R", {1, 4 * H, H}),
                             P("s0", {1, B, H}), C("pads", {6}, {0, 0, 0, 0, 0, 0})},
                  .loss_outputs = {0, 1, 2},
                  .build = [](Graph& g) {
                    Value* pads = add(g, "Identity", {g.find_value("pads")});
                    Value* x = add(g, "Pad", {g.find_value("X"), pads});
                    std::vector<Value*> outs;
                    for (int i = 0; i < 3; ++i) outs.push_back(g.add_unique_value("y"));
                    Node* n = g.add_node("LSTM", {x, g.find_value("W"), g.find_value("R"), nullptr, nullptr,
                                                  g.find_value("s0"), g.find_value("s0")},
                                         outs, "", "lstm");
                    n->attrs["hidden_size"] = attr_int("hidden_size", H);
                    return outs;
                  }});
}

// A training graph with an LSTM survives save + validated reload.
TEST(GradRnn, LSTMTrainingGraphSavesAndReloads) {
  GradCase gc = rnn_case({.op = "LSTM", .direction = "bidirectional", .h0 = true, .c0 = true, .lens = {3, 2}});
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("g");
  Graph& g = *m->graph;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Value*> ins;
  for (const GradInput& in : gc.inputs) {
    if (in.omitted) {
      ins.push_back(nullptr);
      continue;
    }
    std::vector<double> v = in.values;
    if (v.empty())
      for (int64_t k = 0; k < shape_numel(in.shape); ++k) v.push_back(u(rng));
    Tensor t = in.dtype == DataType::Int32 ? T_<int32_t>(in.shape, v) : T_<double>(in.shape, v);
    ins.push_back(g.add_initializer(in.name, t));
  }
  std::vector<Value*> outs = {g.get_or_add_value("Y"), g.get_or_add_value("Y_h"), g.get_or_add_value("Y_c")};
  Node* n = g.add_node("LSTM", ins, outs, "", "lstm");
  for (const auto& a : gc.attrs) n->attrs[a.name] = a;
  Value* L = add(g, "Add", {add(g, "ReduceSum", {outs[0]}, {attr_int("keepdims", 0)}),
                            add(g, "ReduceSum", {outs[2]}, {attr_int("keepdims", 0)})});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, {"X", "W", "R", "B", "h0", "c0"});
}

}  // namespace onyx::test
