// Finite-difference checks of the normalization gradient rules (float64): BatchNormalization
// (training, with its running statistics in the loss, and inference), LayerNormalization (with
// its Mean / InvStdDev outputs in the loss), RMSNormalization, GroupNormalization (per-group and
// per-channel scale), InstanceNormalization, LpNormalization, MeanVarianceNormalization, LRN.
#include <cmath>

#include "grad_check.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using autodiff::Attrs;
using test::attr_float;
using test::attr_int;
using test::attr_ints;

}  // namespace

TEST(GradNorm, BatchNormalizationTraining) {
  for (Shape xs : {Shape{4, 3, 2, 2}, Shape{5, 3}, Shape{3, 3, 4}}) {
    SCOPED_TRACE(shape_str(xs));
    check_gradient({.op = "BatchNormalization",
                    .inputs = {P("x", xs), P("scale", {3}, 0.5, 1.5), P("b", {3}),
                               C("mean", {3}, {0.1, -0.2, 0.3}, DataType::Double),
                               C("var", {3}, {1.0, 0.5, 2.0}, DataType::Double)},
                    .attrs = {attr_int("training_mode", 1), attr_float("epsilon", 1e-3)},
                    .outputs = 3});
  }
}

// The builder always trains BatchNormalization; inference mode is reached through
// build_backward_graphs, checked against dx = dy*scale/sqrt(var+eps), dscale, dB by hand.
TEST(GradNorm, BatchNormalizationInferenceMode) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("bn");
  Graph& g = *m->graph;
  const int64_t N = 2, Cc = 3, S = 4;
  std::vector<double> xv(N * Cc * S), sc = {0.7, 1.2, -0.4}, bv = {0.1, 0.2, 0.3},
                                      mv = {0.5, -0.1, 0.2}, vv = {1.5, 0.3, 2.0};
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(1.3 * static_cast<double>(i));
  Value* x = g.get_or_add_value("x");
  x->type =
      ValueType::tensor(DataType::Double, SymShape{Dim::fixed(N), Dim::fixed(Cc), Dim::fixed(S)});
  g.inputs.push_back(x);
  g.add_initializer("scale", Tensor::from_vector<double>({Cc}, sc));
  g.add_initializer("b", Tensor::from_vector<double>({Cc}, bv));
  g.add_initializer("mean", Tensor::from_vector<double>({Cc}, mv));
  g.add_initializer("var", Tensor::from_vector<double>({Cc}, vv));
  auto y = node(g, "BatchNormalization", {"x", "scale", "b", "mean", "var"},
                {attr_float("epsilon", 1e-2)});
  g.outputs.push_back(y[0]);
  auto bg = autodiff::build_backward_graphs(*m, {"x", "scale", "b"});
  SessionOptions so;
  so.opt_level = OptLevel::None;
  Session fwd(std::move(bg.forward), so), bwd(std::move(bg.backward), so);
  NamedTensors feeds = {{"x", Tensor::from_vector<double>({N, Cc, S}, xv)}};
  auto saved = fwd.run(feeds);
  std::vector<double> dyv(xv.size());
  for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = std::cos(0.7 * static_cast<double>(i));
  // The backward reads the seed, the saved activations and whichever parameters it needs.
  NamedTensors avail = saved;
  avail[bg.seeds[0]] = Tensor::from_vector<double>({N, Cc, S}, dyv);
  avail["x"] = feeds.at("x");
  avail["scale"] = Tensor::from_vector<double>({Cc}, sc);
  avail["b"] = Tensor::from_vector<double>({Cc}, bv);
  NamedTensors bfeeds;
  for (const auto& in : bwd.inputs()) bfeeds[in.name] = avail.at(in.name);
  auto grads = bwd.run(bfeeds);
  std::vector<double> dx(xv.size()), dscale(Cc, 0), db(Cc, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < Cc; ++c)
      for (int64_t s = 0; s < S; ++s) {
        size_t i = static_cast<size_t>((n * Cc + c) * S + s);
        double inv = 1.0 / std::sqrt(vv[c] + static_cast<double>(1e-2f));
        dx[i] = dyv[i] * sc[c] * inv;
        dscale[c] += dyv[i] * (xv[i] - mv[c]) * inv;
        db[c] += dyv[i];
      }
  auto expect_near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  };
  expect_near(grads.at(bg.grads[0]).to_double_vector(), dx);
  expect_near(grads.at(bg.grads[1]).to_double_vector(), dscale);
  expect_near(grads.at(bg.grads[2]).to_double_vector(), db);
}

TEST(GradNorm, LayerNormalization) {
  // axis -1, 1, 0; stash_type float (statistics recomputed in float64) and double (the
  // kernel's Mean / InvStdDev outputs reused).
  for (int64_t stash : {1, 11}) {
    SCOPED_TRACE(stash);
    check_gradient({.op = "LayerNormalization",
                    .inputs = {P("x", {2, 3, 4}), P("scale", {4}, 0.5, 1.5), P("b", {4})},
                    .attrs = {attr_int("stash_type", stash)}});
    check_gradient({.op = "LayerNormalization",
                    .inputs = {P("x", {2, 3, 4}), P("scale", {3, 4}, 0.5, 1.5), P("b", {3, 4})},
                    .attrs = {attr_int("axis", 1), attr_float("epsilon", 1e-3),
                              attr_int("stash_type", stash)}});
    check_gradient({.op = "LayerNormalization",
                    .inputs = {P("x", {2, 3}), P("scale", {2, 3}, 0.5, 1.5), P("b", {2, 3})},
                    .attrs = {attr_int("axis", 0), attr_int("stash_type", stash)}});
    // Broadcast scale, no bias; Mean / InvStdDev outputs already in the model.
    check_gradient({.op = "LayerNormalization",
                    .inputs = {P("x", {2, 3, 4}), P("scale", {4}, 0.5, 1.5)},
                    .attrs = {attr_int("axis", -2), attr_int("stash_type", stash)},
                    .outputs = 3});
  }
}

TEST(GradNorm, BatchNormalizationRunningStatisticsInTheLoss) {
  // In training mode outputs 1 and 2 are momentum * running + (1 - momentum) * the batch's
  // mean / variance, so gradients reaching them flow back into x; scale and B get zeros when
  // only they are in the loss.
  auto bn_inputs = [](Shape xs) {
    return std::vector<GradInput>{P("x", xs), P("scale", {3}, 0.5, 1.5), P("b", {3}),
                                  C("mean", {3}, {0.1, -0.2, 0.3}, DataType::Double),
                                  C("var", {3}, {1.0, 0.5, 2.0}, DataType::Double)};
  };
  for (std::vector<int> outs : {std::vector<int>{0, 1, 2}, {1}, {2}, {1, 2}, {0, 2}})
    for (double momentum : {0.9, 0.3}) {
      SCOPED_TRACE(fmt::format("outputs {} momentum {}", fmt::join(outs, ","), momentum));
      check_gradient({.op = "BatchNormalization",
                      .inputs = bn_inputs({4, 3, 2}),
                      .attrs = {attr_int("training_mode", 1), attr_float("epsilon", 1e-3),
                                attr_float("momentum", momentum)},
                      .outputs = 3,
                      .loss_outputs = outs});
    }
  check_gradient({.op = "BatchNormalization",
                  .inputs = bn_inputs({2, 3, 2, 2}),
                  .attrs = {attr_int("training_mode", 1)},
                  .outputs = 3,
                  .loss_outputs = {0, 1, 2}});
}

TEST(GradNorm, LayerNormalizationMeanAndInvStdDevInTheLoss) {
  // Gradients reaching Mean and InvStdDev count; with only Mean (or only InvStdDev) in the
  // loss, Y has no gradient at all and scale / B get zeros. stash_type double: the outputs are
  // float64 like X.
  for (std::vector<int> outs : {std::vector<int>{0, 1, 2}, {1}, {2}, {1, 2}, {0, 1}, {0, 2}})
    for (int64_t axis : {-1, 1, 0}) {
      SCOPED_TRACE(fmt::format("outputs {} axis {}", fmt::join(outs, ","), axis));
      Shape ps = axis == -1 ? Shape{4} : axis == 1 ? Shape{3, 4} : Shape{2, 3, 4};
      check_gradient({.op = "LayerNormalization",
                      .inputs = {P("x", {2, 3, 4}), P("scale", ps, 0.5, 1.5), P("b", ps)},
                      .attrs = {attr_int("axis", axis), attr_int("stash_type", 11),
                                attr_float("epsilon", 1e-3)},
                      .outputs = 3,
                      .loss_outputs = outs});
    }
}

TEST(GradNorm, LayerNormalizationFloatStatisticsOfDoubleInput) {
  // stash_type float (the default): Mean / InvStdDev are float32, cast to float64 for the loss;
  // their gradients come back as float32 and are cast to X's dtype. Steps and tolerances sized
  // for the float32 rounding of the statistics.
  check_gradient({.op = "LayerNormalization",
                  .inputs = {P("x", {3, 5}), P("scale", {5}, 0.5, 1.5)},
                  .eps = 1e-3,
                  .rtol = 1e-3,
                  .atol = 1e-4,
                  .build = [](Graph& g) -> std::vector<Value*> {
                    auto y = node(g, "LayerNormalization", {"x", "scale"}, {}, 3);
                    auto to_double = [&](Value* v) {
                      return add(g, "Cast", {v}, {attr_int("to", int64_t(DataType::Double))});
                    };
                    Value* stats = add(g, "Add", {to_double(y[1]), to_double(y[2])});
                    return {add(g, "Add", {y[0], stats})};
                  }});
}

TEST(GradNorm, RMSNormalization) {
  // Opset 23: axis -1, 1, 0 (negative and positive), scale broadcast over leading axes,
  // epsilon, stash_type.
  struct Case {
    int64_t axis;
    Shape scale;
  };
  for (Case k : {Case{-1, {4}}, Case{-1, {1, 4}}, Case{1, {3, 4}}, Case{1, {4}}, Case{-2, {3, 1}},
                 Case{0, {2, 3, 4}}}) {
    SCOPED_TRACE(fmt::format("axis {} scale {}", k.axis, shape_str(k.scale)));
    check_gradient({.op = "RMSNormalization",
                    .inputs = {P("x", {2, 3, 4}), P("scale", k.scale, 0.5, 1.5)},
                    .attrs = {attr_int("axis", k.axis)},
                    .opset = 23});
  }
  check_gradient({.op = "RMSNormalization",
                  .inputs = {P("x", {5, 6}), P("scale", {6}, 0.5, 1.5)},
                  .attrs = {attr_float("epsilon", 1e-2), attr_int("stash_type", 11)},
                  .opset = 23});
}

TEST(GradNorm, GroupNormalizationPerGroupAndPerChannelScale) {
  // Opset 18: scale and B hold one value per group; opset 21: one per channel. Groups 1, 2 and
  // one per channel; 3-D, 4-D and 2-D (one element per channel) inputs.
  for (Shape xs : {Shape{2, 4, 3}, Shape{2, 4, 2, 2}, Shape{3, 4}})
    for (int64_t groups : {1, 2, 4}) {
      SCOPED_TRACE(fmt::format("x {} groups {}", shape_str(xs), groups));
      Attrs a = {attr_int("num_groups", groups), attr_float("epsilon", 1e-3)};
      if (xs.size() > 2 || groups < 4)  // one element per group has zero variance
        check_gradient({.op = "GroupNormalization",
                        .inputs = {P("x", xs), P("scale", {groups}, 0.5, 1.5), P("b", {groups})},
                        .attrs = a,
                        .opset = 18});
      check_gradient({.op = "GroupNormalization",
                      .inputs = {P("x", xs), P("scale", {4}, 0.5, 1.5), P("b", {4})},
                      .attrs = a,
                      .opset = 21});
    }
  // Default epsilon; only the input trained.
  check_gradient({.op = "GroupNormalization",
                  .inputs = {P("x", {2, 6, 3}),
                             C("scale", {6}, {0.5, 1.5, -0.7, 1.1, 0.9, 2.0}, DataType::Double),
                             C("b", {6}, {0, 0.1, 0.2, 0.3, 0.4, 0.5}, DataType::Double)},
                  .attrs = {attr_int("num_groups", 3)},
                  .opset = 21});
}

TEST(GradNorm, InstanceNormalization) {
  for (Shape xs : {Shape{2, 3, 4}, Shape{2, 3, 2, 3}, Shape{1, 2, 5}}) {
    SCOPED_TRACE(shape_str(xs));
    check_gradient({.op = "InstanceNormalization",
                    .inputs = {P("x", xs), P("scale", {xs[1]}, 0.5, 1.5), P("b", {xs[1]})}});
  }
  check_gradient({.op = "InstanceNormalization",
                  .inputs = {P("x", {2, 3, 4}), P("scale", {3}, -1.5, 1.5), P("b", {3})},
                  .attrs = {attr_float("epsilon", 1e-2)},
                  .opset = 13});
}

TEST(GradNorm, LpNormalization) {
  // p = 1 has a kink where an element is 0 and both p have one where a whole norm is 0: the
  // values stay away from 0 (the rule gives 0 for a zero norm, as the kernel's output is).
  std::vector<double> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 ? -1 : 1) * (0.15 + 0.05 * double(i % 7));
  auto x = PV("x", {2, 3, 4}, v);
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 0, 1, 2, -2}) {
      SCOPED_TRACE(fmt::format("p {} axis {}", p, axis));
      check_gradient({.op = "LpNormalization",
                      .inputs = {x},
                      .attrs = {attr_int("p", p), attr_int("axis", axis)}});
    }
  check_gradient({.op = "LpNormalization", .inputs = {x}});  // p 2, axis -1 by default
}

TEST(GradNorm, MeanVarianceNormalization) {
  check_gradient({.op = "MeanVarianceNormalization", .inputs = {P("x", {2, 3, 2, 2})}});
  for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 1}, {-1}, {0, 2}}) {
    SCOPED_TRACE(fmt::format("axes {}", fmt::join(axes, ",")));
    check_gradient({.op = "MeanVarianceNormalization",
                    .inputs = {P("x", {3, 4, 2})},
                    .attrs = {attr_ints("axes", axes)}});
  }
  check_gradient({.op = "MeanVarianceNormalization",
                  .inputs = {P("x", {2, 3, 2, 2})},
                  .attrs = {attr_ints("axes", {1, 2, 3})},
                  .opset = 13});
}

TEST(GradNorm, LRN) {
  // Odd and even window sizes (an even window reaches one channel further up than down), a
  // window wider than the channels, and alpha large enough that the cross-channel term matters.
  for (int64_t size : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE(size);
    check_gradient({.op = "LRN",
                    .inputs = {P("x", {2, 5, 3})},
                    .attrs = {attr_int("size", size), attr_float("alpha", 0.8),
                              attr_float("beta", 0.6), attr_float("bias", 1.5)}});
  }
  check_gradient({.op = "LRN", .inputs = {P("x", {2, 4, 2, 2})}, .attrs = {attr_int("size", 3)}});
  check_gradient({.op = "LRN",
                  .inputs = {P("x", {1, 6, 2, 3}, -2, 2)},
                  .attrs = {attr_int("size", 5), attr_float("alpha", 2.0), attr_float("beta", 1.3),
                            attr_float("bias", 0.7)}});
}

namespace {

/// x -> GroupNormalization -> Mish -> LRN -> InstanceNormalization -> RMSNormalization ->
/// LpNormalization * MeanVarianceNormalization(x), over the initializers of norm_inputs().
std::vector<Value*> norm_graph(Graph& g) {
  auto v = [&](const char* n) { return g.find_value(n); };
  Value* gn = add(g, "GroupNormalization", {v("x"), v("gs"), v("gb")}, {attr_int("num_groups", 2)});
  Value* lrn =
      add(g, "LRN", {add(g, "Mish", {gn})}, {attr_int("size", 3), attr_float("alpha", 0.5)});
  Value* in = add(g, "InstanceNormalization", {lrn, v("is"), v("ib")});
  Value* rms = add(g, "RMSNormalization", {in, v("rs")}, {attr_int("axis", 1)});
  Value* lp = add(g, "LpNormalization", {rms}, {attr_int("p", 2), attr_int("axis", 1)});
  return {add(g, "Mul",
              {lp, add(g, "MeanVarianceNormalization", {v("x")}, {attr_ints("axes", {0, 2})})})};
}

std::vector<GradInput> norm_inputs() {
  return {P("x", {2, 4, 3}),      P("gs", {4}, 0.5, 1.5), P("gb", {4}),
          P("is", {4}, 0.5, 1.5), P("ib", {4}),           P("rs", {4, 3}, 0.5, 1.5)};
}

}  // namespace

TEST(GradNorm, MultiOpGraphSurvivesSaveReload) {
  check_gradient({.op = "graph", .inputs = norm_inputs(), .opset = 23, .build = norm_graph});
  auto m = std::make_unique<Model>();
  m->ir_version = 10;
  m->opsets.push_back({"", 23});
  m->graph = std::make_unique<Graph>("norms");
  Graph& g = *m->graph;
  std::vector<std::string> names;
  for (const auto& in : norm_inputs()) {
    std::vector<double> vals(static_cast<size_t>(shape_numel(in.shape)));
    for (size_t i = 0; i < vals.size(); ++i)
      vals[i] =
          0.5 + 0.4 * std::sin(1.7 * static_cast<double>(i) + static_cast<double>(names.size()));
    g.add_initializer(in.name, Tensor::from_vector<double>(in.shape, vals));
    names.push_back(in.name);
  }
  Value* L = add(g, "ReduceSum", {norm_graph(g)[0]}, {attr_int("keepdims", 0)});
  g.outputs = {L};
  expect_same_after_save_reload(*m, {.kind = "output", .output = L->name}, names);
}

}  // namespace onyx::test
