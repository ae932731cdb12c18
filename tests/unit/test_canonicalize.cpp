// graph/canonicalize: old-opset attribute forms become the newest input forms.
#include "graph/canonicalize.h"

#include <climits>
#include <cmath>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::ModelBuilder;

namespace {

/// The initializer feeding input `i` of `n`, or nullptr.
const Tensor* init_input(const Graph& g, const Node& n, int i) {
  return n.has_input(i) ? g.initializer(n.inputs[static_cast<size_t>(i)]) : nullptr;
}

}  // namespace

TEST(Canonicalize, SqueezeAxesAttributeBecomesInput) {
  ModelBuilder b(11);
  b.input("x", DataType::Float, Shape{1, 3, 1});
  onyx::test::set_attrs(b.node("Squeeze", {"x"}, {"y"}), {attr_ints("axes", {0, 2})});
  b.output("y");
  auto model = b.build();
  canonicalize_opsets(*model);
  const Node& n = *model->graph->nodes()[0];
  EXPECT_FALSE(n.has_attr("axes"));
  const Tensor* axes = init_input(*model->graph, n, 1);
  ASSERT_NE(axes, nullptr);
  EXPECT_EQ(axes->dtype(), DataType::Int64);
  EXPECT_EQ(axes->to_int64_vector(), (std::vector<int64_t>{0, 2}));
}

TEST(Canonicalize, ClipAndPadValuesTakeTheInputDtype) {
  ModelBuilder b(6);
  b.input("x", DataType::Double, Shape{4});
  onyx::test::set_attrs(b.node("Clip", {"x"}, {"c"}), {attr_float("max", 2.5f)});
  onyx::test::set_attrs(b.node("Pad", {"c"}, {"y"}),
                        {attr_ints("pads", {1, 1}), attr_float("value", 7.f)});
  b.output("y");
  auto model = b.build();
  canonicalize_opsets(*model);
  const Graph& g = *model->graph;
  const Node& clip = *g.nodes()[0];
  EXPECT_FALSE(clip.has_input(1));  // no min given: stays omitted
  ASSERT_NE(init_input(g, clip, 2), nullptr);
  EXPECT_EQ(init_input(g, clip, 2)->dtype(), DataType::Double);
  EXPECT_DOUBLE_EQ(init_input(g, clip, 2)->to_double_vector()[0], 2.5);
  const Node& pad = *g.nodes()[1];
  EXPECT_TRUE(pad.attrs.empty());
  EXPECT_EQ(init_input(g, pad, 1)->to_int64_vector(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(init_input(g, pad, 2)->to_double_vector(), (std::vector<double>{7.0}));
}

// A value attribute past the input's integer type (or NaN) saturates instead of being cast
// with undefined behaviour (a malformed old-opset model can put integers under Pad).
TEST(Canonicalize, PadValuePastAnIntegerTypeSaturates) {
  for (float value : {1e30f, -1e30f, std::nanf("")}) {
    ModelBuilder b(2);
    b.input("x", DataType::Int32, Shape{4});
    onyx::test::set_attrs(b.node("Pad", {"x"}, {"y"}), {attr_ints("pads", {1, 1}), attr_float("value", value)});
    b.output("y");
    auto model = b.build();
    canonicalize_opsets(*model);
    const Tensor* v = init_input(*model->graph, *model->graph->nodes()[0], 2);
    ASSERT_NE(v, nullptr);
    ASSERT_EQ(v->dtype(), DataType::Int32);
    const int32_t want = value != value ? 0 : value > 0 ? INT32_MAX : INT32_MIN;
    EXPECT_EQ(*v->data<int32_t>(), want) << value;
  }
}

TEST(Canonicalize, NewOpsetsAreLeftAlone) {
  ModelBuilder b(13);
  b.input("x", DataType::Float, Shape{1, 3});
  b.initializer("axes", Tensor::from_vector<int64_t>({1}, {0}));
  b.node("Squeeze", {"x", "axes"}, {"y"});
  b.output("y");
  auto model = b.build();
  canonicalize_opsets(*model);
  EXPECT_EQ(model->graph->initializers.size(), 1u);
}

TEST(Canonicalize, SubgraphsAreRewritten) {
  ModelBuilder b(11);
  b.input("c", DataType::Bool, Shape{});
  b.input("x", DataType::Float, Shape{3});
  Node& iff = b.node("If", {"c"}, {"y"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto g = std::make_shared<Graph>(branch);
    Value* out = g->get_or_add_value(std::string(branch) + "_out");
    Node* u = g->add_node("Unsqueeze", {g->get_or_add_value("x")}, {out});
    u->attrs["axes"] = attr_ints("axes", {0});
    g->outputs.push_back(out);
    Attribute a;
    a.name = branch;
    a.type = Attribute::Type::Graph;
    a.g = g;
    iff.attrs[branch] = a;
  }
  b.output("y");
  auto model = b.build();
  canonicalize_opsets(*model);
  const Graph& then_g = *model->graph->nodes()[0]->attrs.at("then_branch").g;
  const Node& u = *then_g.nodes()[0];
  EXPECT_FALSE(u.has_attr("axes"));
  ASSERT_NE(init_input(then_g, u, 1), nullptr);
  EXPECT_EQ(init_input(then_g, u, 1)->to_int64_vector(), (std::vector<int64_t>{0}));
}

TEST(Canonicalize, OldOpsetModelsRunThroughTheSession) {
  ModelBuilder b(9);  // Unsqueeze-1 and Slice-1 take attributes
  b.input("x", DataType::Float, Shape{2, 3});
  onyx::test::set_attrs(b.node("Unsqueeze", {"x"}, {"u"}), {attr_ints("axes", {0})});
  onyx::test::set_attrs(b.node("Slice", {"u"}, {"y"}),
                        {attr_ints("starts", {1}), attr_ints("ends", {3}), attr_ints("axes", {2})});
  b.output("y");
  Session s = b.session();
  auto out = s.run({{"x", Tensor::from_vector<float>({2, 3}, {0, 1, 2, 3, 4, 5})}});
  EXPECT_EQ(out.at("y").shape(), (Shape{1, 2, 2}));
  onyx::test::expect_near(out.at("y"), {1, 2, 4, 5});
}
