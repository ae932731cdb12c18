// Finite-difference checks of the control-flow gradient rules (float64): "If" through the branch
// taken at run time, "Loop" through the iterations that ran (fixed trip counts, a data-dependent
// early stop, scan outputs, outer values read whole or one slice per iteration, nesting).
#include "autodiff/subgraph.h"
#include "grad_check.h"
#include "graph/error.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

const ValueType kScalarI64 = ValueType::tensor(DataType::Int64, SymShape{});
const ValueType kScalarBool = ValueType::tensor(DataType::Bool, SymShape{});

ValueType f64(std::vector<int64_t> dims) {
  SymShape s;
  for (int64_t d : dims) s.push_back(Dim::fixed(d));
  return ValueType::tensor(DataType::Double, s);
}

/// A subgraph of `g` with typed inputs.
std::shared_ptr<Graph> subgraph(Graph& g, const std::string& name,
                                const std::vector<std::pair<std::string, ValueType>>& inputs = {}) {
  auto b = std::make_shared<Graph>(name, &g);
  for (const auto& [n, t] : inputs) {
    Value* v = b->get_or_add_value(n);
    v->type = t;
    b->inputs.push_back(v);
  }
  return b;
}

/// The value named `n` in subgraph `b` (an input, or an outer value read by name).
Value* ref(Graph& b, const std::string& n) { return b.get_or_add_value(n); }

/// Adds a node with subgraph attributes to `g` and registers what its subgraphs read.
std::vector<Value*> add_control(Graph& g, const std::string& op, const std::vector<Value*>& ins,
                                int n_out, std::vector<Attribute> attrs) {
  std::vector<Value*> outs;
  for (int i = 0; i < n_out; ++i) outs.push_back(g.add_unique_value(op + "_out"));
  Node* n = g.add_node(op, ins, outs, "", fmt::format("{}_{}", op, g.num_nodes()));
  for (auto& a : attrs) n->attrs[a.name] = a;
  autodiff::update_implicit_inputs(g, n);
  return outs;
}

Attribute graph(const std::string& name, std::shared_ptr<Graph> b) {
  return autodiff::graph_attr(name, std::move(b));
}

/// A Loop body (i, cond, x) -> (cond, x' = tanh(x W), x' * x' as a scan output).
std::shared_ptr<Graph> tanh_body(Graph& g, const std::string& w) {
  auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 3})}});
  Value* x1 = add(*b, "Tanh", {add(*b, "MatMul", {ref(*b, "x"), ref(*b, w)})});
  b->outputs = {add(*b, "Identity", {ref(*b, "c")}), x1, add(*b, "Mul", {x1, x1})};
  return b;
}

/// An If whose then branch computes tanh(x W) + a and else branch x * a (a broadcast [3]).
std::vector<Value*> if_tanh_or_scale(Graph& g) {
  auto t = subgraph(g, "then");
  t->outputs = {add(*t, "Add", {add(*t, "Tanh", {add(*t, "MatMul", {ref(*t, "x"), ref(*t, "W")})}), ref(*t, "a")})};
  auto e = subgraph(g, "else");
  e->outputs = {add(*e, "Mul", {ref(*e, "x"), ref(*e, "a")})};
  return add_control(g, "If", {g.find_value("cond")}, 1, {graph("then_branch", t), graph("else_branch", e)});
}

GradInput Cond(bool v) { return C("cond", {}, {v ? 1.0 : 0.0}, DataType::Bool); }
GradInput Trips(int64_t m) { return C("M", {}, {static_cast<double>(m)}); }

}  // namespace

// The branch taken at run time gets the gradient; the other branch's reads get zeros.
TEST(GradControlFlow, IfEachBranch) {
  for (bool cond : {true, false}) {
    SCOPED_TRACE(cond);
    check_gradient({.op = "If",
                    .inputs = {Cond(cond), P("x", {2, 3}), P("W", {3, 3}), P("a", {3})},
                    .build = if_tanh_or_scale});
  }
}

// Two outputs, a branch that returns an outer value itself, only one output in the loss.
TEST(GradControlFlow, IfOutputsAndPassThrough) {
  auto build = [](Graph& g) {
    auto t = subgraph(g, "then");
    t->outputs = {ref(*t, "W"), add(*t, "Sigmoid", {ref(*t, "x")})};
    auto e = subgraph(g, "else");
    e->outputs = {add(*e, "Mul", {ref(*e, "W"), ref(*e, "W")}), add(*e, "Neg", {ref(*e, "x")})};
    return add_control(g, "If", {g.find_value("cond")}, 2, {graph("then_branch", t), graph("else_branch", e)});
  };
  for (bool cond : {true, false})
    for (std::vector<int> loss : {std::vector<int>{0, 1}, std::vector<int>{1}}) {
      SCOPED_TRACE(cond);
      check_gradient({.op = "If",
                      .inputs = {Cond(cond), P("x", {2, 3}), P("W", {2, 3})},
                      .loss_outputs = loss,
                      .build = build});
    }
}

// The condition is computed from the data at run time.
TEST(GradControlFlow, IfOnComputedCondition) {
  auto build = [](Graph& g) {
    Value* s = add(g, "ReduceSum", {g.find_value("x")}, {attr_int("keepdims", 0)});
    Value* cond = add(g, "Greater", {s, g.find_value("zero")});
    auto t = subgraph(g, "then");
    t->outputs = {add(*t, "Mul", {ref(*t, "x"), ref(*t, "W")})};
    auto e = subgraph(g, "else");
    e->outputs = {add(*e, "Exp", {ref(*e, "x")})};
    auto outs = add_control(g, "If", {cond}, 1, {graph("then_branch", t), graph("else_branch", e)});
    return std::vector<Value*>{add(g, "Mul", {outs[0], g.find_value("x")})};
  };
  for (double shift : {2.0, -2.0}) {
    SCOPED_TRACE(shift);
    check_gradient({.op = "If",
                    .inputs = {P("x", {2, 3}, shift - 1, shift + 1), P("W", {3}),
                               C("zero", {}, {0.0}, DataType::Double)},
                    .build = build});
  }
}

// x_{k+1} = tanh(x_k W) for 3 iterations: the final x and every iteration's x^2 in the loss.
TEST(GradControlFlow, LoopFixedTripCount) {
  auto build = [](Graph& g) {
    return add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 2,
                       {graph("body", tanh_body(g, "W"))});
  };
  for (std::vector<int> loss : {std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{0, 1}}) {
    check_gradient({.op = "Loop",
                    .inputs = {Trips(3), Cond(true), P("x0", {2, 3}), P("W", {3, 3})},
                    .loss_outputs = loss,
                    .build = build});
  }
  // M = 0: no iteration runs.
  check_gradient({.op = "Loop",
                  .inputs = {Trips(0), Cond(true), P("x0", {2, 3}), P("W", {3, 3})},
                  .loss_outputs = {0},
                  .build = build});
}

// The body decides when to stop: x grows each iteration until max(x) reaches 2.5 (within the
// 10 allowed), an int64 counter rides along, and the number of iterations follows the data.
TEST(GradControlFlow, LoopDataDependentStop) {
  auto build_with = [](Graph& g, bool trip_count) {
    auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"n", kScalarI64}, {"x", f64({2, 3})}});
    Value* grow = add(*b, "Sigmoid", {add(*b, "MatMul", {ref(*b, "x"), ref(*b, "W")})});
    Value* x1 = add(*b, "Add", {add(*b, "Add", {ref(*b, "x"), grow}), ref(*b, "half")});
    Value* more = add(*b, "Less", {add(*b, "ReduceMax", {x1}, {attr_int("keepdims", 0)}), ref(*b, "limit")});
    Value* n1 = add(*b, "Add", {ref(*b, "n"), ref(*b, "one")});
    b->outputs = {more, n1, x1, add(*b, "Mul", {x1, ref(*b, "x")})};
    return add_control(g, "Loop", {trip_count ? g.find_value("M") : nullptr, nullptr, g.find_value("n0"), g.find_value("x0")}, 3,
                       {graph("body", b)});
  };
  auto build = [&](Graph& g) { return build_with(g, true); };
  std::vector<GradInput> ins = {Trips(10), C("n0", {}, {0}), P("x0", {2, 3}), P("W", {3, 3}),
                                C("half", {}, {0.5}, DataType::Double), C("limit", {}, {2.5}, DataType::Double),
                                C("one", {}, {1})};
  check_gradient({.op = "Loop", .inputs = ins, .loss_outputs = {1, 2}, .build = build});
  // No trip count: the condition alone ends the loop.
  check_gradient({.op = "Loop", .inputs = ins, .loss_outputs = {1, 2},
                  .build = [&](Graph& g) { return build_with(g, false); }});
  // The trip count really was data-dependent: with a larger limit the loop runs longer.
  auto trips = [&](double limit) {
    auto m = std::make_unique<Model>();
    m->ir_version = 9;
    m->opsets.push_back({"", 17});
    m->graph = std::make_unique<Graph>("g");
    Graph& g = *m->graph;
    g.add_initializer("M", Tensor::scalar<int64_t>(10));
    g.add_initializer("n0", Tensor::scalar<int64_t>(0));
    g.add_initializer("x0", Tensor::from_vector<double>({2, 3}, {0.1, -0.2, 0.3, 0.0, 0.5, -0.5}));
    g.add_initializer("W", Tensor::from_vector<double>({3, 3}, {0.2, -0.1, 0.4, 0.3, 0.1, -0.3, 0.0, 0.2, 0.1}));
    g.add_initializer("half", Tensor::scalar<double>(0.5));
    g.add_initializer("limit", Tensor::scalar<double>(limit));
    g.add_initializer("one", Tensor::scalar<int64_t>(1));
    g.outputs.push_back(build(g)[0]);
    return Session(std::move(m)).run({}).begin()->second.to_int64_vector().at(0);
  };
  EXPECT_LT(trips(2.5), trips(4.0));
  EXPECT_LT(trips(4.0), 10);
}

// An outer sequence read one slice per iteration (Gather(X, i)): its gradient is stacked, and
// rows past the iterations that ran (M = 4 of 5) get zeros. R is read whole.
TEST(GradControlFlow, LoopReadsOneSlicePerIteration) {
  auto build = [](Graph& g) {
    auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"h", f64({2, 3})}});
    Value* xi = add(*b, "Gather", {ref(*b, "X"), ref(*b, "i")});
    Value* h1 = add(*b, "Tanh", {add(*b, "Add", {add(*b, "MatMul", {ref(*b, "h"), ref(*b, "R")}), xi})});
    b->outputs = {add(*b, "Identity", {ref(*b, "c")}), h1, add(*b, "Identity", {h1})};
    b->outputs[2]->type = f64({2, 3});  // the dtype of the scan output when no iteration runs
    return add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("h0")}, 2,
                       {graph("body", b)});
  };
  for (int64_t m : {4, 0}) {
    SCOPED_TRACE(m);
    check_gradient({.op = "Loop",
                    .inputs = {Trips(m), Cond(true), P("h0", {2, 3}), P("X", {5, 2, 3}), P("R", {3, 3})},
                    .loss_outputs = {0, 1},
                    .build = build});
  }
  // X also read whole (ReduceMean) in the same body: its gradient is accumulated densely.
  auto mixed = [](Graph& g) {
    auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"h", f64({2, 3})}});
    Value* xi = add(*b, "Gather", {ref(*b, "X"), ref(*b, "i")});
    Value* mean = add(*b, "ReduceMean", {ref(*b, "X")}, {attr_int("keepdims", 0)});
    Value* h1 = add(*b, "Tanh", {add(*b, "Add", {add(*b, "Mul", {ref(*b, "h"), mean}), xi})});
    b->outputs = {add(*b, "Identity", {ref(*b, "c")}), h1};
    return add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("h0")}, 1,
                       {graph("body", b)});
  };
  check_gradient({.op = "Loop",
                  .inputs = {Trips(3), Cond(true), P("h0", {2, 3}), P("X", {4, 2, 3})},
                  .build = mixed});
}

// Control flow inside control flow: an If in a Loop body (branch picked by the iteration's
// parity) and a Loop in a Loop body, both reading outer parameters two scopes up.
TEST(GradControlFlow, Nested) {
  auto if_in_loop = [](Graph& g) {
    auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 3})}});
    Value* even = add(*b, "Equal", {add(*b, "Mod", {ref(*b, "i"), ref(*b, "two")}), ref(*b, "zero")});
    auto t = subgraph(*b, "then");
    t->outputs = {add(*t, "Tanh", {add(*t, "MatMul", {ref(*t, "x"), ref(*t, "W")})})};
    auto e = subgraph(*b, "else");
    e->outputs = {add(*e, "Mul", {ref(*e, "x"), ref(*e, "a")})};
    auto y = add_control(*b, "If", {even}, 1, {graph("then_branch", t), graph("else_branch", e)});
    b->outputs = {add(*b, "Identity", {ref(*b, "c")}), y[0]};
    return add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 1,
                       {graph("body", b)});
  };
  check_gradient({.op = "Loop",
                  .inputs = {Trips(3), Cond(true), P("x0", {2, 3}), P("W", {3, 3}), P("a", {3}),
                             C("two", {}, {2}), C("zero", {}, {0})},
                  .build = if_in_loop});
  auto loop_in_loop = [](Graph& g) {
    auto b = subgraph(g, "outer", {{"j", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 3})}});
    auto inner = add_control(*b, "Loop", {ref(*b, "M2"), ref(*b, "c"), ref(*b, "x")}, 2,
                             {graph("body", tanh_body(*b, "W"))});
    Value* x1 = add(*b, "Add", {inner[0], ref(*b, "a")});
    b->outputs = {add(*b, "Identity", {ref(*b, "c")}), x1, add(*b, "ReduceSum", {inner[1]}, {attr_int("keepdims", 0)})};
    return add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 2,
                       {graph("body", b)});
  };
  check_gradient({.op = "Loop",
                  .inputs = {Trips(2), Cond(true), C("M2", {}, {2}), P("x0", {2, 3}), P("W", {3, 3}), P("a", {3})},
                  .loss_outputs = {0, 1},
                  .build = loop_in_loop});
}

// The training graph with a backward Loop survives save + validated reload.
TEST(GradControlFlow, LoopTrainingGraphSavesAndReloads) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("g");
  Graph& g = *m->graph;
  g.add_initializer("M", Tensor::scalar<int64_t>(3));
  g.add_initializer("cond", Tensor::scalar<bool>(true));
  g.add_initializer("x0", Tensor::from_vector<double>({2, 3}, {0.1, -0.2, 0.3, 0.0, 0.5, -0.5}));
  g.add_initializer("W", Tensor::from_vector<double>({3, 3}, {0.2, -0.1, 0.4, 0.3, 0.1, -0.3, 0.0, 0.2, 0.1}));
  auto outs = add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 2,
                          {graph("body", tanh_body(g, "W"))});
  Value* L = add(g, "ReduceSum", {outs[1]}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, {"x0", "W"});
}

// The forward/backward split (for callers that own the loss) keeps what the backward Loop reads
// through its body: the saved iterations and the outer values.
TEST(GradControlFlow, LoopForwardBackwardSplit) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("g");
  Graph& g = *m->graph;
  g.add_initializer("M", Tensor::scalar<int64_t>(3));
  g.add_initializer("cond", Tensor::scalar<bool>(true));
  Value* x0 = g.get_or_add_value("x0");
  x0->type = f64({2, 3});
  g.inputs.push_back(x0);
  g.add_initializer("W", Tensor::from_vector<double>({3, 3}, {0.2, -0.1, 0.4, 0.3, 0.1, -0.3, 0.0, 0.2, 0.1}));
  auto outs = add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), x0}, 2,
                          {graph("body", tanh_body(g, "W"))});
  g.outputs = {outs[0]};
  auto bg = autodiff::build_backward_graphs(*m, {"x0", "W"});
  Tensor x = Tensor::from_vector<double>({2, 3}, {0.1, -0.2, 0.3, 0.0, 0.5, -0.5});
  Tensor w = g.initializers.at("W");
  NamedTensors f = Session(std::move(bg.forward)).run({{"x0", x}, {"W", w}});
  NamedTensors feeds = {{bg.seeds[0], Tensor::from_vector<double>({2, 3}, {1, 1, 1, 1, 1, 1})}};
  for (const auto& s : bg.saved) feeds[s] = f.at(s);
  Session backward(std::move(bg.backward));
  for (const auto& in : backward.inputs())
    if (in.name == "W") feeds["W"] = w;
  NamedTensors grads = backward.run(feeds);
  // Against the training graph of sum(x_3).
  Value* L = add(g, "ReduceSum", {outs[0]}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  g.inputs.clear();
  g.add_initializer("x0", x);
  auto tg = autodiff::build_training_graph(*m, {.kind = "output", .output = L->name}, {"x0", "W"});
  NamedTensors want = Session(std::move(tg.model)).run({});
  expect_near(grads.at("x0_grad"), want.at(tg.grads[0]).to_double_vector(), 1e-12);
  expect_near(grads.at("W_grad"), want.at(tg.grads[1]).to_double_vector(), 1e-12);
}

// What is not differentiable is refused by name, and missing_gradients looks inside bodies.
TEST(GradControlFlow, UnsupportedIsReported) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("g");
  Graph& g = *m->graph;
  g.add_initializer("M", Tensor::scalar<int64_t>(2));
  g.add_initializer("cond", Tensor::scalar<bool>(true));
  g.add_initializer("x0", Tensor::from_vector<double>({2, 2}, {1, 2, 3, 4}));
  auto b = subgraph(g, "body", {{"i", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 2})}});
  Value* x1 = add(*b, "Det", {ref(*b, "x")});
  Value* x2 = add(*b, "Add", {ref(*b, "x"), x1});
  b->outputs = {add(*b, "Identity", {ref(*b, "c")}), x2};
  Node* loop = add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 1,
                           {graph("body", b)})[0]->producer;
  g.outputs = {loop->outputs[0]};
  auto missing = autodiff::missing_gradients(*m);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].op_type, "Det");
  EXPECT_EQ(missing[0].node, loop->name + "/" + x1->producer->name);
  try {
    autodiff::build_training_graph(*m, {.kind = "mse", .output = loop->outputs[0]->name}, {"x0"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no gradient rule for op Det"), std::string::npos) << e.what();
  }
  // A carried value that grows each iteration (x -> concat(x, x)) cannot be stacked.
  auto grow = subgraph(g, "grow", {{"i", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 2})}});
  grow->outputs = {add(*grow, "Identity", {ref(*grow, "c")}),
                   add(*grow, "Concat", {ref(*grow, "x"), ref(*grow, "x")}, {attr_int("axis", 0)})};
  Node* growing = add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0")}, 1,
                              {graph("body", grow)})[0]->producer;
  g.outputs = {growing->outputs[0]};
  try {
    autodiff::build_training_graph(*m, {.kind = "mse", .output = growing->outputs[0]->name}, {"x0"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keep their shape"), std::string::npos) << e.what();
  }
  // A sequence carried next to the differentiated tensor (SequenceInsert per iteration).
  ValueType seq;
  seq.kind = ValueType::Kind::Sequence;
  seq.inner = std::make_shared<ValueType>(f64({2, 2}));
  auto collect = subgraph(g, "collect", {{"i", kScalarI64}, {"c", kScalarBool}, {"x", f64({2, 2})}, {"s", seq}});
  Value* x3 = add(*collect, "Tanh", {ref(*collect, "x")});
  collect->outputs = {add(*collect, "Identity", {ref(*collect, "c")}), x3,
                      add(*collect, "SequenceInsert", {ref(*collect, "s"), x3})};
  Value* empty = add(g, "SequenceEmpty", {}, {attr_int("dtype", static_cast<int64_t>(DataType::Double))});
  Node* collecting = add_control(g, "Loop", {g.find_value("M"), g.find_value("cond"), g.find_value("x0"), empty}, 2,
                                 {graph("body", collect)})[0]->producer;
  g.outputs = {collecting->outputs[0]};
  missing = autodiff::missing_gradients(*m);
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_EQ(missing[0].why, "loop-carried value 's' is not a tensor");
  EXPECT_EQ(missing[1].op_type, "SequenceInsert");
  try {
    autodiff::build_training_graph(*m, {.kind = "mse", .output = collecting->outputs[0]->name}, {"x0"});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need loop-carried tensors"), std::string::npos) << e.what();
  }
}

}  // namespace onyx::test
