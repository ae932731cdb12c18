// Finite-difference checks of the nn gradient rules (float64): Conv, ConvTranspose, MaxPool,
// AveragePool, LpPool, GlobalAveragePool (normalizations: test_grad_norm.cpp); float32 runs (oneDNN
// kernels, BatchNormalization and LayerNormalization too) against float64; a network of them
// saved and reloaded.
#include <cmath>

#include "grad_check.h"
#include "save_reload_check.h"

namespace onyx::test {

namespace {

using test::attr_float;
using test::attr_int;
using test::attr_ints;
using test::attr_string;

/// Attribute lists: {"strides", {2, 1}} style, plus ints/strings.
Attribute ints(const char* n, std::vector<int64_t> v) { return attr_ints(n, std::move(v)); }


}  // namespace

// ---------------------------------------------------------------- Conv

TEST(GradNn, Conv1D) {
  check_gradient({.op = "Conv", .inputs = {P("x", {2, 3, 7}), P("w", {4, 3, 3}), P("b", {4})}});
  check_gradient({.op = "Conv",
                  .inputs = {P("x", {2, 3, 9}), P("w", {2, 3, 3}), P("b", {2})},
                  .attrs = {ints("strides", {2}), ints("pads", {1, 2}), ints("dilations", {2})}});
  // Stride leaving trailing inputs no window reaches.
  check_gradient({.op = "Conv",
                  .inputs = {P("x", {1, 2, 8}), P("w", {3, 2, 2})},
                  .attrs = {ints("strides", {3}), ints("kernel_shape", {2})}});
}

TEST(GradNn, Conv2DStridesPadsDilations) {
  check_gradient(
      {.op = "Conv",
       .inputs = {P("x", {2, 2, 5, 6}), P("w", {3, 2, 3, 2}), P("b", {3})},
       .attrs = {ints("strides", {2, 1}), ints("pads", {1, 0, 0, 1}), ints("dilations", {1, 2})}});
  check_gradient({.op = "Conv",
                  .inputs = {P("x", {1, 3, 6, 5}), P("w", {2, 3, 2, 2})},
                  .attrs = {ints("strides", {2, 3}), ints("pads", {1, 1, 1, 1})}});
}

TEST(GradNn, ConvGroups) {
  check_gradient(
      {.op = "Conv",
       .inputs = {P("x", {2, 4, 5, 5}), P("w", {6, 2, 3, 3}), P("b", {6})},
       .attrs = {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1}), attr_int("group", 2)}});
  // Depthwise, 1-D.
  check_gradient({.op = "Conv",
                  .inputs = {P("x", {2, 3, 6}), P("w", {3, 1, 3})},
                  .attrs = {attr_int("group", 3), ints("dilations", {2})}});
}

TEST(GradNn, ConvAutoPad) {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    SCOPED_TRACE(ap);
    check_gradient({.op = "Conv",
                    .inputs = {P("x", {1, 2, 6, 5}), P("w", {2, 2, 3, 2}), P("b", {2})},
                    .attrs = {attr_string("auto_pad", ap), ints("strides", {2, 2})}});
    check_gradient({.op = "Conv",
                    .inputs = {P("x", {2, 2, 7}), P("w", {3, 2, 4})},
                    .attrs = {attr_string("auto_pad", ap)}});
  }
}

TEST(GradNn, Conv3D) {
  check_gradient({.op = "Conv",
                  .inputs = {P("x", {1, 2, 4, 4, 3}), P("w", {2, 2, 2, 3, 2}), P("b", {2})},
                  .attrs = {ints("strides", {2, 1, 1}), ints("pads", {0, 1, 1, 1, 0, 0})}});
}

// The second Conv's input comes from a Conv, so its spatial size is unknown when the rule runs:
// the run-time pads (SAME) and the cropped ConvTranspose paths.
TEST(GradNn, ConvChainWithUnknownInputShape) {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "NOTSET"}) {
    SCOPED_TRACE(ap);
    GradCase gc{.op = "Conv(Conv)",
                .inputs = {P("x", {2, 2, 7, 6}), P("w1", {3, 2, 2, 2}), P("w2", {4, 3, 3, 2}),
                           P("b2", {4})}};
    std::string pad = ap;
    gc.build = [pad](Graph& g) {
      auto h = node(g, "Conv", {"x", "w1"}, {ints("pads", {1, 0, 0, 1})});
      std::vector<Attribute> a = {ints("strides", {2, 2}), attr_string("auto_pad", pad)};
      if (pad == "NOTSET")
        a = {ints("strides", {2, 3}), ints("pads", {1, 0, 0, 1}), attr_int("group", 1)};
      g.find_value("w2");
      std::vector<Value*> in = {h[0], g.find_value("w2"), g.find_value("b2")};
      Value* y = g.get_or_add_value("y");
      Node* n = g.add_node("Conv", in, {y}, "", "conv2");
      for (auto& at : a) n->attrs[at.name] = at;
      return std::vector<Value*>{y};
    };
    check_gradient(gc);
  }
}

// ---------------------------------------------------------------- ConvTranspose

TEST(GradNn, ConvTranspose1D) {
  check_gradient(
      {.op = "ConvTranspose", .inputs = {P("x", {2, 3, 4}), P("w", {3, 2, 3}), P("b", {2})}});
  check_gradient(
      {.op = "ConvTranspose",
       .inputs = {P("x", {2, 3, 4}), P("w", {3, 2, 3}), P("b", {2})},
       .attrs = {ints("strides", {2}), ints("output_padding", {1}), ints("pads", {1, 0})}});
  check_gradient({.op = "ConvTranspose",
                  .inputs = {P("x", {1, 2, 5}), P("w", {2, 3, 2})},
                  .attrs = {ints("strides", {3}), ints("dilations", {2}), ints("pads", {0, 2})}});
}

TEST(GradNn, ConvTranspose2DGroupsDilations) {
  check_gradient({.op = "ConvTranspose",
                  .inputs = {P("x", {2, 4, 3, 3}), P("w", {4, 1, 2, 3}), P("b", {2})},
                  .attrs = {attr_int("group", 2), ints("strides", {2, 1}), ints("dilations", {1, 2}),
                            ints("pads", {0, 1, 1, 0})}});
}

TEST(GradNn, ConvTransposeAutoPadAndOutputShape) {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER"}) {
    SCOPED_TRACE(ap);
    check_gradient({.op = "ConvTranspose",
                    .inputs = {P("x", {1, 2, 3, 4}), P("w", {2, 2, 3, 3})},
                    .attrs = {attr_string("auto_pad", ap), ints("strides", {2, 2})}});
  }
  check_gradient({.op = "ConvTranspose",
                  .inputs = {P("x", {1, 2, 3, 3}), P("w", {2, 1, 3, 3}), P("b", {1})},
                  .attrs = {ints("strides", {2, 2}), ints("output_shape", {7, 6})}});
}

// ---------------------------------------------------------------- pooling

TEST(GradNn, MaxPool) {
  auto mp = [](Shape s, std::vector<Attribute> a) {
    check_gradient({.op = "MaxPool", .inputs = {P("x", std::move(s))}, .attrs = std::move(a)});
  };
  mp({2, 3, 4, 4}, {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})});
  mp({1, 2, 5, 5}, {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1})});  // overlapping
  mp({1, 2, 5, 6}, {ints("kernel_shape", {2, 3}), ints("strides", {2, 2}), attr_int("ceil_mode", 1)});
  mp({1, 1, 7, 7},
     {ints("kernel_shape", {2, 2}), ints("dilations", {2, 2}), ints("strides", {2, 1})});
  mp({2, 2, 9},
     {ints("kernel_shape", {3}), ints("strides", {2}), attr_string("auto_pad", "SAME_UPPER")});
  mp({1, 2, 3, 4, 3}, {ints("kernel_shape", {2, 2, 2})});
  // Dilations with pads, strides and ceil_mode, in 1-D, 2-D (auto_pad) and 3-D.
  mp({1, 2, 10}, {ints("kernel_shape", {3}), ints("dilations", {2}), ints("pads", {2, 1}),
                  ints("strides", {2}), attr_int("ceil_mode", 1)});
  mp({1, 2, 7, 7}, {ints("kernel_shape", {3, 2}), ints("dilations", {2, 3}),
                    attr_string("auto_pad", "SAME_LOWER")});
  mp({1, 1, 5, 6, 5}, {ints("kernel_shape", {2, 2, 2}), ints("dilations", {2, 1, 2}),
                       ints("strides", {1, 2, 2}), ints("pads", {1, 0, 1, 0, 1, 1}),
                       attr_int("ceil_mode", 1)});
  // Indices already produced by the model are reused.
  check_gradient({.op = "MaxPool",
                  .inputs = {P("x", {1, 2, 4, 4})},
                  .attrs = {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})},
                  .outputs = 2});
}

TEST(GradNn, MaxPoolNeedsOpset16) {
  try {
    check_gradient({.op = "MaxPool",
                    .inputs = {P("x", {1, 1, 4, 4})},
                    .attrs = {ints("kernel_shape", {2, 2})},
                    .opset = 15});
    ADD_FAILURE() << "no error at opset 15";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opset 16"), std::string::npos) << e.what();
  }
}

TEST(GradNn, MaxPoolColumnMajorIndicesAreRefused) {
  try {
    check_gradient({.op = "MaxPool",
                    .inputs = {P("x", {1, 1, 4, 4})},
                    .attrs = {ints("kernel_shape", {2, 2}), attr_int("storage_order", 1)}});
    ADD_FAILURE() << "no error for storage_order=1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("storage_order"), std::string::npos) << e.what();
  }
}

// output_shape fixes the transposed convolution's extent, so its gradient needs X's spatial
// size: known through a Conv (shape inference sizes convolutions), refused when symbolic.
TEST(GradNn, ConvTransposeOutputShapeNeedsKnownInput) {
  GradCase gc{.op = "ConvTranspose",
              .inputs = {P("x", {1, 2, 4}), P("w1", {2, 2, 1}), P("w2", {2, 1, 3})}};
  gc.build = [](Graph& g) {
    auto h = node(g, "Conv", {"x", "w1"}, {});
    return node(g, "ConvTranspose", {h[0]->name, "w2"},
                {ints("strides", {2}), ints("output_shape", {9})});
  };
  check_gradient(gc);

  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("convt");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Double,
                              SymShape{Dim::fixed(1), Dim::fixed(2), Dim::symbol("length")});
  g.inputs.push_back(x);
  g.add_initializer("w2", Tensor::from_vector<double>({2, 1, 3}, {1, 2, 3, 4, 5, 6}));
  auto y = node(g, "ConvTranspose", {"x", "w2"}, {ints("strides", {2}), ints("output_shape", {9})});
  g.outputs = {add(g, "ReduceSum", {y[0]}, {attr_int("keepdims", 0)})};
  try {
    autodiff::build_training_graph(*m, {.kind = "output"}, {"w2"});
    ADD_FAILURE() << "no error for output_shape over an input of unknown size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output_shape needs the spatial shape"), std::string::npos)
        << e.what();
  }
}

TEST(GradNn, AveragePoolCountIncludePadAndCeilMode) {
  for (int include : {0, 1}) {
    for (int ceil : {0, 1}) {
      SCOPED_TRACE(fmt::format("count_include_pad={} ceil_mode={}", include, ceil));
      check_gradient({.op = "AveragePool",
                      .inputs = {P("x", {2, 2, 5, 6})},
                      .attrs = {ints("kernel_shape", {3, 2}), ints("strides", {2, 2}),
                                ints("pads", {1, 0, 1, 1}), attr_int("count_include_pad", include),
                                attr_int("ceil_mode", ceil)}});
      check_gradient(
          {.op = "AveragePool",
           .inputs = {P("x", {1, 3, 8})},
           .attrs = {ints("kernel_shape", {3}), ints("strides", {3}), ints("pads", {1, 1}),
                     attr_int("count_include_pad", include), attr_int("ceil_mode", ceil)}});
    }
  }
}

TEST(GradNn, AveragePoolAutoPadDilations3D) {
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"})
    for (int include : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} count_include_pad={}", ap, include));
      check_gradient({.op = "AveragePool",
                      .inputs = {P("x", {1, 2, 5, 7})},
                      .attrs = {ints("kernel_shape", {2, 3}), ints("strides", {2, 2}),
                                attr_string("auto_pad", ap), attr_int("count_include_pad", include)}});
    }
  check_gradient({.op = "AveragePool",
                  .inputs = {P("x", {1, 2, 7, 7})},
                  .attrs = {ints("kernel_shape", {2, 2}), ints("dilations", {2, 3}),
                            ints("pads", {1, 1, 0, 1})},
                  .opset = 19});
  check_gradient({.op = "AveragePool",
                  .inputs = {P("x", {1, 2, 3, 4, 5})},
                  .attrs = {ints("kernel_shape", {2, 2, 3}), ints("strides", {1, 2, 2})}});
}

TEST(GradNn, LpPool) {
  auto lp = [](Shape s, std::vector<Attribute> a, int64_t opset = 17) {
    check_gradient({.op = "LpPool", .inputs = {P("x", std::move(s))}, .attrs = std::move(a),
                    .opset = opset});
  };
  for (int64_t p : {1, 2, 3}) {
    SCOPED_TRACE(p);
    lp({2, 2, 5, 6}, {ints("kernel_shape", {2, 3}), attr_int("p", p)});
    lp({1, 2, 5, 5}, {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}),
                      ints("strides", {2, 2}), attr_int("p", p)});
  }
  lp({1, 2, 9},
     {ints("kernel_shape", {3}), ints("strides", {2}), attr_string("auto_pad", "SAME_UPPER")});
  lp({1, 1, 3, 4, 4}, {ints("kernel_shape", {2, 2, 2}), attr_int("p", 3)});
  // Opset 18: dilations and ceil_mode.
  lp({1, 2, 7, 8},
     {ints("kernel_shape", {2, 2}), ints("dilations", {2, 3}), ints("strides", {2, 2}),
      attr_int("ceil_mode", 1)},
     18);
}

// Pools after a Conv: the pool's input size is unknown when its rule runs.
TEST(GradNn, PoolsWithUnknownInputShape) {
  for (const char* op : {"AveragePool", "MaxPool", "LpPool"}) {
    SCOPED_TRACE(op);
    GradCase gc{.op = op, .inputs = {P("x", {1, 2, 6, 7}), P("w", {2, 2, 2, 2})}};
    std::string o = op;
    gc.build = [o](Graph& g) {
      auto h = node(g, "Conv", {"x", "w"}, {});
      Value* y = g.get_or_add_value("y");
      Node* n = g.add_node(o, {h[0]}, {y}, "", "pool");
      n->attrs["kernel_shape"] = ints("kernel_shape", {3, 2});
      n->attrs["strides"] = ints("strides", {2, 2});
      n->attrs["auto_pad"] = attr_string("auto_pad", "SAME_LOWER");
      n->attrs["count_include_pad"] = attr_int("count_include_pad", 1);
      return std::vector<Value*>{y};
    };
    check_gradient(gc);
  }
}

TEST(GradNn, GlobalAveragePool) {
  check_gradient({.op = "GlobalAveragePool", .inputs = {P("x", {2, 3, 4, 5})}});
  check_gradient({.op = "GlobalAveragePool", .inputs = {P("x", {2, 2, 3})}});
}

TEST(GradNn, GlobalMaxPool) {
  check_gradient({.op = "GlobalMaxPool", .inputs = {P("x", {2, 3, 4, 5})}});
  check_gradient({.op = "GlobalMaxPool", .inputs = {P("x", {2, 2, 3})}});
  // A two-way tie in plane (0, 1): each gets half of dy, what central differences see.
  check_gradient({.op = "GlobalMaxPool",
                  .inputs = {PV("x", {1, 2, 4}, {0.1, 0.5, -0.3, 0.2, 0.7, -0.1, 0.7, 0.3})}});
}

// ---------------------------------------------------------------- float32 (oneDNN paths)

namespace {

/// The op's training-graph gradients for float32 and float64 copies of one set of inputs.
std::vector<std::pair<std::vector<double>, std::vector<double>>> grads_f32_f64(
    const std::string& op, const std::vector<std::pair<std::string, Shape>>& ins,
    const std::vector<Attribute>& attrs, int n_out = 1) {
  std::vector<std::pair<std::vector<double>, std::vector<double>>> res(ins.size());
  for (DataType dt : {DataType::Float, DataType::Double}) {
    auto m = std::make_unique<Model>();
    m->ir_version = 9;
    m->opsets.push_back({"", 17});
    m->graph = std::make_unique<Graph>("f32");
    Graph& g = *m->graph;
    std::vector<std::string> names;
    for (size_t k = 0; k < ins.size(); ++k) {
      std::vector<double> v(static_cast<size_t>(shape_numel(ins[k].second)));
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = std::sin(0.37 * static_cast<double>(i) + static_cast<double>(k));
      Tensor t = Tensor::from_vector<double>(ins[k].second, v);
      if (dt == DataType::Float) {
        std::vector<float> f(v.begin(), v.end());
        t = Tensor::from_vector<float>(ins[k].second, f);
      }
      g.add_initializer(ins[k].first, t);
      names.push_back(ins[k].first);
    }
    auto y = node(g, op, names, attrs, n_out, "op");
    // L = sum(y * cos(i)), as a projection the kernel cannot special-case.
    Value* s = g.get_or_add_value("sq");
    g.add_node("Mul", {y[0], y[0]}, {s}, "", "sq");
    Value* L = g.get_or_add_value("L");
    g.add_node("ReduceSum", {s}, {L}, "", "L")->attrs["keepdims"] = attr_int("keepdims", 0);
    g.outputs = {L};
    autodiff::LossSpec spec{.kind = "output", .output = "L"};
    auto tg = autodiff::build_training_graph(*m, spec, names);
    Session sess(std::move(tg.model), SessionOptions{});
    auto out = sess.run({});
    for (size_t k = 0; k < names.size(); ++k) {
      auto v = out.at(tg.grads[k]).to_double_vector();
      (dt == DataType::Float ? res[k].first : res[k].second) = v;
    }
  }
  return res;
}

void expect_f32_matches_f64(const std::string& op,
                            const std::vector<std::pair<std::string, Shape>>& ins,
                            const std::vector<Attribute>& attrs, int n_out = 1) {
  SCOPED_TRACE(op);
  auto r = grads_f32_f64(op, ins, attrs, n_out);
  for (size_t k = 0; k < r.size(); ++k) {
    ASSERT_EQ(r[k].first.size(), r[k].second.size());
    double scale = 0;
    for (double v : r[k].second) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < r[k].first.size(); ++i)
      EXPECT_NEAR(r[k].first[i], r[k].second[i], 1e-4 * (1 + scale))
          << ins[k].first << "[" << i << "]";
  }
}

}  // namespace

// Float runs take oneDNN's (de)convolution and pooling primitives; their gradients must agree
// with the float64 reference loops.
TEST(GradNn, Float32MatchesFloat64) {
  expect_f32_matches_f64("Conv", {{"x", {2, 4, 7, 6}}, {"w", {6, 2, 3, 2}}, {"b", {6}}},
                         {ints("strides", {2, 2}), ints("pads", {1, 0, 1, 1}), attr_int("group", 2),
                          ints("dilations", {1, 2})});
  expect_f32_matches_f64("ConvTranspose", {{"x", {2, 4, 3, 4}}, {"w", {4, 3, 3, 2}}, {"b", {6}}},
                         {ints("strides", {2, 2}), ints("pads", {1, 0, 0, 1}),
                          ints("output_padding", {1, 1}), attr_int("group", 2)});
  expect_f32_matches_f64(
      "MaxPool", {{"x", {2, 3, 6, 5}}},
      {ints("kernel_shape", {3, 2}), ints("strides", {2, 2}), attr_int("ceil_mode", 1)});
  expect_f32_matches_f64("AveragePool", {{"x", {2, 3, 6, 5}}},
                         {ints("kernel_shape", {3, 2}), ints("strides", {2, 2}),
                          ints("pads", {1, 1, 0, 0}), attr_int("count_include_pad", 1)});
  expect_f32_matches_f64("LayerNormalization", {{"x", {3, 8}}, {"scale", {8}}, {"b", {8}}}, {});
  expect_f32_matches_f64(
      "BatchNormalization",
      {{"x", {4, 3, 5}}, {"scale", {3}}, {"b", {3}}, {"mean", {3}}, {"var", {3}}},
      {attr_int("training_mode", 1)}, 3);
}

// ---------------------------------------------------------------- save / reload

namespace {

/// Conv -> BatchNorm (training) -> MaxPool -> grouped SAME Conv -> AveragePool ->
/// GlobalAveragePool -> LayerNorm over the initializers named in cnn_inputs().
std::vector<Value*> build_cnn(Graph& g) {
  auto h = node(g, "Conv", {"x", "w1", "b1"}, {ints("pads", {1, 1, 1, 1})}, 1, "conv1");
  auto bn = node(g, "BatchNormalization", {h[0]->name, "s1", "o1", "m1", "v1"},
                 {attr_int("training_mode", 1)}, 3, "bn");
  auto mp = node(g, "MaxPool", {bn[0]->name},
                 {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})}, 1, "mp");
  auto c2 = node(g, "Conv", {mp[0]->name, "w2"},
                 {attr_int("group", 2), attr_string("auto_pad", "SAME_UPPER")}, 1, "conv2");
  auto ap = node(g, "AveragePool", {c2[0]->name},
                 {ints("kernel_shape", {2, 2}), ints("pads", {0, 0, 1, 1})}, 1, "ap");
  auto gp = node(g, "GlobalAveragePool", {ap[0]->name}, {}, 1, "gap");
  auto ln =
      node(g, "LayerNormalization", {gp[0]->name, "ln_s", "ln_b"}, {attr_int("axis", 1)}, 1, "ln");
  return ln;
}

std::vector<GradInput> cnn_inputs() {
  return {P("x", {2, 2, 8, 8}),
          P("w1", {4, 2, 3, 3}),
          P("b1", {4}),
          P("s1", {4}, 0.5, 1.5),
          P("o1", {4}),
          C("m1", {4}, {0, 0, 0, 0}, DataType::Double),
          C("v1", {4}, {1, 1, 1, 1}, DataType::Double),
          P("w2", {4, 2, 2, 2}),
          P("ln_s", {4, 1, 1}, 0.5, 1.5),
          P("ln_b", {4, 1, 1})};
}

}  // namespace

TEST(GradNn, MultiOpNetworkMatchesFiniteDifferences) {
  check_gradient(
      {.op = "cnn", .inputs = cnn_inputs(), .rtol = 1e-4, .atol = 1e-6, .build = build_cnn});
}

TEST(GradNn, TrainingGraphSavesAndReloads) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("cnn");
  Graph& g = *m->graph;
  std::mt19937_64 rng(7);
  std::vector<std::string> params;
  for (const auto& in : cnn_inputs()) {
    std::vector<double> v = in.values;
    std::uniform_real_distribution<double> u(in.lo, in.hi);
    if (v.empty())
      for (int64_t i = 0; i < shape_numel(in.shape); ++i) v.push_back(u(rng));
    g.add_initializer(in.name, Tensor::from_vector<double>(in.shape, v));
    if (in.param) params.push_back(in.name);
  }
  auto y = build_cnn(g);
  Value* sq = g.get_or_add_value("sq");
  g.add_node("Mul", {y[0], y[0]}, {sq}, "", "sq");
  Value* L = g.get_or_add_value("L");
  g.add_node("ReduceSum", {sq}, {L}, "", "L")->attrs["keepdims"] = attr_int("keepdims", 0);
  g.outputs = {L};

  expect_same_after_save_reload(*m, {.kind = "output", .output = "L"}, params);
}

}  // namespace onyx::test
