// Finite-difference checks of the elementwise gradient rules (float64).
#include <random>

#include "grad_check.h"
#include "graph/error.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using test::attr_int;
using autodiff::Attrs;

/// Values away from 0 (for Abs and other kinks), `n` of them, alternating signs.
std::vector<double> away_from_zero(int64_t n, uint64_t seed = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.2, 1.5);
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1 : 1) * u(rng);
  return v;
}

}  // namespace

TEST(GradElementwise, AddSubMulDivWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {2, 3}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {3}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {2, 1, 4}), P("b", {3, 1}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {}), P("b", {2, 2}, 0.5, 2)}});
  }
}

TEST(GradElementwise, NegIdentity) {
  check_gradient({.op = "Neg", .inputs = {P("x", {2, 3})}});
  check_gradient({.op = "Identity", .inputs = {P("x", {4})}});
}

TEST(GradElementwise, PowBaseAndExponentWithBroadcasting) {
  check_gradient({.op = "Pow", .inputs = {P("a", {2, 3}, 0.5, 2), P("b", {2, 3}, -1.5, 2)}});
  check_gradient({.op = "Pow", .inputs = {P("a", {2, 3}, 0.5, 2), P("b", {3}, -1.5, 2)}});
  check_gradient({.op = "Pow", .inputs = {P("a", {3, 1}, 0.5, 2), P("b", {2, 1, 4}, -1, 2)}});
  check_gradient({.op = "Pow", .inputs = {P("a", {2, 2}, 0.5, 2), P("b", {}, 0.5, 3)}});
  // Negative base with an integer exponent of another dtype: only the base has a gradient.
  check_gradient(
      {.op = "Pow",
       .inputs = {PV("a", {4}, {-1.5, -0.4, 0.3, 1.2}), C("b", {}, {3}, DataType::Int64)}});
  check_gradient(
      {.op = "Pow",
       .inputs = {PV("a", {4}, {-1.5, -0.4, 0.3, 1.2}), C("b", {}, {2}, DataType::Float)}});
  // Base 0 with a positive exponent: y = 0 for every b nearby, so d/db is 0 (not NaN).
  check_gradient(
      {.op = "Pow", .inputs = {C("a", {3}, {0.0, 0.5, 2.0}, DataType::Double), P("b", {3}, 1, 2)}});
}

TEST(GradElementwise, UnaryMath) {
  check_gradient({.op = "Sqrt", .inputs = {P("x", {2, 3}, 0.3, 2)}});
  check_gradient({.op = "Exp", .inputs = {P("x", {2, 3}, -2, 2)}});
  check_gradient({.op = "Log", .inputs = {P("x", {2, 3}, 0.3, 2)}});
  check_gradient({.op = "Abs", .inputs = {PV("x", {2, 3}, away_from_zero(6))}});
  check_gradient({.op = "Reciprocal", .inputs = {PV("x", {2, 3}, away_from_zero(6))}});
  check_gradient({.op = "Sin", .inputs = {P("x", {2, 3}, -3, 3)}});
  check_gradient({.op = "Cos", .inputs = {P("x", {2, 3}, -3, 3)}});
}

TEST(GradElementwise, TrigAndHyperbolicInsideTheirDomains) {
  // Tan away from its poles; Asin/Acos/Atanh inside (-1, 1) and away from the ends, where the
  // derivative blows up; Acosh above 1.
  struct Case {
    const char* op;
    double lo, hi;
  };
  for (Case k : {Case{"Tan", -1.3, 1.3}, Case{"Asin", -0.9, 0.9}, Case{"Acos", -0.9, 0.9},
                 Case{"Atan", -4, 4}, Case{"Sinh", -2.5, 2.5}, Case{"Cosh", -2.5, 2.5},
                 Case{"Asinh", -4, 4}, Case{"Acosh", 1.1, 5}, Case{"Atanh", -0.9, 0.9}}) {
    SCOPED_TRACE(k.op);
    check_gradient({.op = k.op, .inputs = {P("x", {2, 3, 2}, k.lo, k.hi)}});
  }
}

TEST(GradElementwise, MaxMinVariadicWithBroadcasting) {
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op, .inputs = {P("a", {2, 3})}});
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {2, 3})}});
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {3})}});
    check_gradient({.op = op, .inputs = {P("a", {2, 1, 4}), P("b", {3, 1}), P("c", {4})}});
    // Some inputs fixed: only the others get gradients.
    check_gradient(
        {.op = op, .inputs = {P("a", {2, 3}), C("b", {3}, {0.1, -0.2, 0.3}, DataType::Double)}});
  }
}

TEST(GradElementwise, MaxMinTiesSplitEvenly) {
  // a[0] ties b[0], a[2] ties b[2]: each gets half of dy, which is exactly what central
  // differences measure at a two-way tie.
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op,
                    .inputs = {PV("a", {2, 3}, {0.5, -0.3, 0.25, 0.9, -0.8, 0.1}),
                               PV("b", {2, 3}, {0.5, 0.4, 0.25, -0.9, 0.7, -0.6})}});
    // Broadcast: b[1] ties a[0][1] and a[1][1].
    check_gradient({.op = op,
                    .inputs = {PV("a", {2, 3}, {0.9, 0.3, -0.7, -0.9, 0.3, 0.6}),
                               PV("b", {3}, {0.1, 0.3, 0.2})}});
  }
}

TEST(GradElementwise, SumVariadicWithBroadcasting) {
  check_gradient({.op = "Sum", .inputs = {P("a", {2, 3})}});
  check_gradient({.op = "Sum", .inputs = {P("a", {2, 3}), P("b", {3})}});
  check_gradient({.op = "Sum", .inputs = {P("a", {2, 1, 4}), P("b", {3, 1}), P("c", {})}});
}

TEST(GradElementwise, MeanVariadicWithBroadcasting) {
  check_gradient({.op = "Mean", .inputs = {P("a", {2, 3})}});
  check_gradient({.op = "Mean", .inputs = {P("a", {2, 3}), P("b", {3})}});
  check_gradient({.op = "Mean", .inputs = {P("a", {2, 1, 4}), P("b", {3, 1}), P("c", {})}});
}

TEST(GradElementwise, ClipWithEitherBoundOmitted) {
  // x away from the bounds -0.5 and 0.4 (the kinks).
  auto x = PV("x", {2, 4}, {-0.9, -0.45, 0.1, 0.35, 0.6, -0.2, 1.2, -0.7});
  auto lo = C("lo", {}, {-0.5}, DataType::Double);
  auto hi = C("hi", {}, {0.4}, DataType::Double);
  check_gradient({.op = "Clip", .inputs = {x, lo, hi}});
  check_gradient({.op = "Clip", .inputs = {x, lo}});
  check_gradient({.op = "Clip", .inputs = {x, None(), hi}});
  check_gradient({.op = "Clip", .inputs = {x}});
}

TEST(GradElementwise, WhereWithBroadcasting) {
  auto cond = C("cond", {2, 3}, {1, 0, 1, 0, 0, 1}, DataType::Bool);
  check_gradient({.op = "Where", .inputs = {cond, P("a", {2, 3}), P("b", {2, 3})}});
  check_gradient({.op = "Where", .inputs = {cond, P("a", {3}), P("b", {2, 1})}});
  check_gradient({.op = "Where",
                  .inputs = {C("c1", {3}, {0, 1, 1}, DataType::Bool), P("a", {2, 3}), P("b", {})}});
}

TEST(GradElementwise, CastRoundTripThroughFloat) {
  // double -> float -> (x3) -> double: both Cast rules; float rounding needs a wide step.
  GradCase gc{.op = "Cast",
              .inputs = {P("x", {2, 3})},
              .eps = 1e-2,
              .rtol = 1e-4,
              .atol = 1e-5,
              .build = [](Graph& g) -> std::vector<Value*> {
                Value* x = g.find_value("x");
                Value* f = add(g, "Cast", {x}, {attr_int("to", int64_t(DataType::Float))});
                Value* three = g.add_initializer("three", Tensor::scalar<float>(3.0f));
                Value* m = add(g, "Mul", {f, three});
                return {add(g, "Cast", {m}, {attr_int("to", int64_t(DataType::Double))})};
              }};
  check_gradient(gc);
  check_gradient(
      {.op = "Cast", .inputs = {P("x", {3})}, .attrs = {attr_int("to", int64_t(DataType::Double))}});
}

TEST(GradElementwise, CastLikeThroughFloatAndBack) {
  // double -> CastLike(float) -> x3 -> CastLike(double); `like` is trained too: it only gives a
  // dtype, so its gradient is 0.
  check_gradient(
      {.op = "CastLike",
       .inputs = {P("x", {2, 3}), P("like", {2})},
       .eps = 1e-2,
       .rtol = 1e-4,
       .atol = 1e-5,
       .build = [](Graph& g) -> std::vector<Value*> {
         Value* f32 = g.add_initializer("f32", Tensor::scalar<float>(0.0f));
         Value* f = add(g, "CastLike", {g.find_value("x"), f32});
         Value* m = add(g, "Mul", {f, g.add_initializer("three", Tensor::scalar<float>(3.0f))});
         return {add(g, "CastLike", {m, g.find_value("like")})};
       }});
}

TEST(GradElementwise, ModWithBroadcasting) {
  // a / b stays clear of integers (where the quotient jumps); fmod=1 truncates, fmod=0 floors
  // (the remainder takes the divisor's sign), so negative quotients tell them apart.
  auto a = PV("a", {2, 3}, {3.7, -5.3, 2.2, -0.9, 7.45, -2.6});
  for (int64_t fmod : {1, 0}) {
    SCOPED_TRACE(fmod);
    Attrs at = {attr_int("fmod", fmod)};
    check_gradient({.op = "Mod",
                    .inputs = {a, PV("b", {2, 3}, {1.5, 2.1, -0.7, 0.4, -1.9, 1.1})},
                    .attrs = at});
    check_gradient({.op = "Mod", .inputs = {a, PV("b", {3}, {1.5, -2.1, 0.8})}, .attrs = at});
    check_gradient({.op = "Mod", .inputs = {a, PV("b", {2, 1}, {-1.3, 0.95})}, .attrs = at});
  }
}

TEST(GradElementwise, SignFloorCeilRoundAreZero) {
  // Values clear of the jumps (0 for Sign, integers for Floor/Ceil, halves for Round); a rule
  // passing dy through would show as 1 where finite differences see 0.
  auto x = PV("x", {2, 4}, {-1.7, -0.3, 0.2, 0.8, 1.3, 2.9, -2.2, 0.65});
  for (const char* op : {"Sign", "Floor", "Ceil", "Round"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op, .inputs = {x}});
    check_gradient({.op = op, .inputs = {x}, .build = [op](Graph& g) -> std::vector<Value*> {
                      Value* v = g.find_value("x");
                      return {add(g, "Mul", {add(g, op, {v}), v})};
                    }});
  }
}

namespace {

/// A multi-op graph of this family: L-ready output Max(Pow(a, b), Sqrt(c)) * Clip(a) + Where.
std::vector<Value*> elementwise_graph(Graph& g) {
  Value* a = g.find_value("a");
  Value* b = g.find_value("b");
  Value* c = g.find_value("c");
  Value* lo = g.add_initializer("lo", Tensor::scalar<double>(0.6));
  Value* mx = add(g, "Max", {add(g, "Pow", {a, b}), add(g, "Sqrt", {c})});
  Value* cl = add(g, "Clip", {a, lo});
  Value* cond = add(g, "Greater", {c, lo});
  Value* w = add(g, "Where", {cond, add(g, "Exp", {b}), add(g, "Log", {a})});
  return {add(g, "Add", {add(g, "Mul", {mx, cl}), add(g, "Mean", {w, add(g, "Abs", {b})})})};
}

}  // namespace

TEST(GradElementwise, MultiOpGraphSurvivesSaveReload) {
  std::vector<GradInput> ins = {PV("a", {2, 3}, {0.5, 0.7, 1.3, 1.9, 0.45, 1.1}),
                                PV("b", {3}, {0.8, -1.3, 1.7}), P("c", {2, 3}, 0.3, 2)};
  check_gradient({.op = "graph", .inputs = ins, .build = elementwise_graph});
  // The same graph as a model with a scalar output, trained, saved and reloaded.
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("elementwise");
  Graph& g = *m->graph;
  g.add_initializer("a", Tensor::from_vector<double>({2, 3}, ins[0].values));
  g.add_initializer("b", Tensor::from_vector<double>({3}, ins[1].values));
  g.add_initializer("c", Tensor::from_vector<double>({2, 3}, {0.4, 0.9, 1.5, 0.5, 1.8, 0.7}));
  Value* y = elementwise_graph(g)[0];
  Value* L = add(g, "ReduceSum", {y}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, {"a", "b", "c"});
}

TEST(GradElementwise, RegisteringTheFamilyTwiceIsAnError) {
  autodiff::RuleTable t;
  autodiff::add_elementwise_rules(t);
  for (const char* op : {"Pow", "Max", "Clip", "Where", "Cast"})
    EXPECT_NE(t.find(op), nullptr) << op;
  try {
    autodiff::add_elementwise_rules(t);
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[autodiff] two gradient rules"), std::string::npos)
        << e.what();
  }
}

}  // namespace onyx::test
