// Finite-difference checks of the com.microsoft fused ops a training graph may contain (an
// optimized model loaded to train), float64: FusedMatMul (alpha, transA/transB, batched and
// broadcast operands) and FusedConv (bias, the residual input Z, every activation), trained
// through their rewrite into the ai.onnx ops they fuse.
#include "grad_check.h"

namespace onyx::test {

namespace {

using test::attr_float;
using test::attr_floats;
using test::attr_int;
using test::attr_ints;
using test::attr_string;

/// One com.microsoft `op` node over the named inputs, its output returned.
Value* fused(Graph& g, const std::string& op, const std::vector<std::string>& ins,
             std::vector<Attribute> attrs) {
  std::vector<Value*> in;
  for (const auto& s : ins) in.push_back(s.empty() ? nullptr : g.find_value(s));
  Value* y = g.add_unique_value(op + "_y");
  Node* n = g.add_node(op, in, {y}, "com.microsoft", fmt::format("{}_{}", op, g.num_nodes()));
  for (auto& a : attrs) n->attrs[a.name] = a;
  return y;
}

void check_fused(const std::string& op, std::vector<GradInput> ins, std::vector<Attribute> attrs) {
  std::vector<std::string> names;
  for (const auto& in : ins) names.push_back(in.omitted ? "" : in.name);
  GradCase gc{.op = op, .inputs = std::move(ins), .opset = 17, .domains = {{"com.microsoft", 1}}};
  gc.build = [=](Graph& g) -> std::vector<Value*> { return {fused(g, op, names, attrs)}; };
  check_gradient(gc);
}

}  // namespace

TEST(GradContrib, FusedMatMul) {
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      SCOPED_TRACE(fmt::format("transA={} transB={}", ta, tb));
      Shape a = ta ? Shape{4, 3} : Shape{3, 4}, b = tb ? Shape{5, 4} : Shape{4, 5};
      check_fused("FusedMatMul", {P("a", a), P("b", b)},
                  {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", 0.7)});
    }
  // Batched A against a shared, transposed B (GPT-2's attention scores); a vector B.
  check_fused("FusedMatMul", {P("a", {2, 3, 3, 4}), P("b", {3, 5, 4})},
              {attr_int("transB", 1), attr_float("alpha", 0.125)});
  check_fused("FusedMatMul", {P("a", {2, 4, 3}), P("b", {4})}, {attr_int("transA", 1)});
}

TEST(GradContrib, FusedConvActivations) {
  const std::vector<std::pair<std::string, std::vector<float>>> acts = {
      {"", {}},   {"Relu", {}},          {"LeakyRelu", {0.2f}},        {"Sigmoid", {}},
      {"Tanh", {}}, {"Clip", {-0.3f, 0.4f}}, {"HardSigmoid", {0.3f, 0.4f}}};
  for (const auto& [act, params] : acts) {
    SCOPED_TRACE(act);
    std::vector<Attribute> attrs = {attr_ints("pads", {1, 1, 1, 1}), attr_ints("strides", {2, 1})};
    if (!act.empty()) attrs.push_back(attr_string("activation", act));
    if (!params.empty()) attrs.push_back(attr_floats("activation_params", params));
    // Z: the residual added before the activation, shaped like the output.
    check_fused("FusedConv",
                {P("x", {2, 2, 5, 4}), P("w", {3, 2, 3, 3}), P("b", {3}), P("z", {2, 3, 3, 4})},
                attrs);
  }
  // Grouped, no bias, no Z.
  check_fused("FusedConv", {P("x", {1, 4, 5, 5}), P("w", {4, 2, 2, 2})},
              {attr_int("group", 2), attr_string("activation", "Relu")});
}

// Fused ops reading others' outputs: an input's dtype is known only once its producer is
// rewritten (fused outputs have no schema to type them).
TEST(GradContrib, ChainsOfFusedOps) {
  GradCase conv{.op = "FusedConv",
                .inputs = {P("x", {1, 2, 4, 4}), P("w1", {2, 2, 3, 3}), P("w2", {3, 2, 1, 1})},
                .opset = 17,
                .domains = {{"com.microsoft", 1}}};
  conv.build = [](Graph& g) -> std::vector<Value*> {
    Value* h = fused(g, "FusedConv", {"x", "w1"},
                     {attr_ints("pads", {1, 1, 1, 1}), attr_string("activation", "Tanh")});
    Value* y = g.add_unique_value("y");
    Node* n = g.add_node("FusedConv", {h, g.find_value("w2")}, {y}, "com.microsoft", "second");
    n->attrs["activation"] = attr_string("activation", "Sigmoid");
    return {y};
  };
  check_gradient(conv);
  GradCase mm{.op = "FusedMatMul",
              .inputs = {P("a", {2, 3}), P("b", {4, 3}), P("c", {4, 2})},
              .opset = 17,
              .domains = {{"com.microsoft", 1}}};
  mm.build = [](Graph& g) -> std::vector<Value*> {
    Value* h = fused(g, "FusedMatMul", {"a", "b"}, {attr_int("transB", 1)});  // [2, 4]
    Value* y = g.add_unique_value("y");
    Node* n = g.add_node("FusedMatMul", {h, g.find_value("c")}, {y}, "com.microsoft", "second");
    n->attrs["alpha"] = attr_float("alpha", 2.0);
    return {y};
  };
  check_gradient(mm);
}

TEST(GradContrib, TransBatchIsRefused) {
  try {
    check_fused("FusedMatMul", {P("a", {2, 3, 4}), P("b", {2, 4, 3})},
                {attr_int("transBatchA", 1)});
    ADD_FAILURE() << "no error for transBatchA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transBatchA"), std::string::npos) << e.what();
  }
}

}  // namespace onyx::test
