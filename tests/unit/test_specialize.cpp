// graph/specialize.h: a graph specialised to concrete input shapes (the first batch's, or a
// smaller batch than the model was exported with) gets concrete shapes everywhere shape
// inference can follow, and refuses shapes that do not fit what the model declares.
#include <gtest/gtest.h>

#include "graph/specialize.h"
#include "test_util.h"

namespace onyx {
namespace {

Dim S(const char* p) { return Dim::symbol(p); }
Dim F(int64_t v) { return Dim::fixed(v); }

SymShape shape_of(const Model& m, const std::string& name) {
  const Value* v = m.graph->find_value(name);
  EXPECT_TRUE(v && v->type.shape) << name;
  return v && v->type.shape ? *v->type.shape : SymShape{};
}

// x [batch, seq, 4] -> MatMul W[4, 3] -> Relu; mask [batch, seq] -> Cast.
std::unique_ptr<Model> symbolic_model() {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{S("batch"), S("seq"), F(4)});
  b.input("mask", DataType::Int64, SymShape{S("batch"), S("seq")});
  b.initializer("W", Tensor::from_vector<float>({4, 3}, std::vector<float>(12, 0.5f)));
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Relu", {"h"}, {"y"});
  b.node("Cast", {"mask"}, {"m"}).attrs["to"] = Attribute::of_int("to", 1);
  b.output("y").output("m");
  return b.build();
}

TEST(Specialize, SymbolicDimsBecomeTheBatchsSizes) {
  auto m = symbolic_model();
  // Only x is given: mask shares its symbols, so it is sized too.
  specialize_input_shapes(*m, {{"x", {8, 5, 4}}});
  EXPECT_EQ(shape_of(*m, "x"), (SymShape{F(8), F(5), F(4)}));
  EXPECT_EQ(shape_of(*m, "mask"), (SymShape{F(8), F(5)}));
  EXPECT_EQ(shape_of(*m, "y"), (SymShape{F(8), F(5), F(3)}));
  EXPECT_EQ(shape_of(*m, "m"), (SymShape{F(8), F(5)}));
}

TEST(Specialize, BindsSymbolsAndRefusesWhatDoesNotFit) {
  auto m = symbolic_model();
  auto dims = bind_input_dims(*m->graph, {{"x", {2, 7, 4}}});
  EXPECT_EQ(dims, (std::map<std::string, int64_t>{{"batch", 2}, {"seq", 7}}));
  // Rank, a fixed dim, a symbol with two sizes, a name that is no input.
  EXPECT_THROW(specialize_input_shapes(*m, {{"x", {2, 7}}}), Error);
  EXPECT_THROW(specialize_input_shapes(*m, {{"x", {2, 7, 5}}}), Error);
  EXPECT_THROW(specialize_input_shapes(*m, {{"x", {2, 7, 4}}, {"mask", {3, 7}}}), Error);
  EXPECT_THROW(specialize_input_shapes(*m, {{"W", {4, 3}}}), Error);
  EXPECT_THROW(specialize_input_shapes(*m, {{"nosuch", {1}}}), Error);
}

// A model exported with batch 16 and a fixed output declaration, checked with batch 2.
TEST(Specialize, ResizingAFixedBatch) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{16, 4});
  b.initializer("W", Tensor::from_vector<float>({4, 3}, std::vector<float>(12, 0.5f)));
  b.node("MatMul", {"x", "W"}, {"y"});
  b.output("y");
  auto m = b.build();
  m->graph->find_value("y")->type = ValueType::tensor(DataType::Float, SymShape{F(16), F(3)});
  EXPECT_THROW(specialize_input_shapes(*m, {{"x", {2, 4}}}), Error) << "fixed dims are kept by default";
  specialize_input_shapes(*m, {{"x", {2, 4}}}, /*resize_fixed=*/true);
  EXPECT_EQ(shape_of(*m, "y"), (SymShape{F(2), F(3)})) << "the old declaration must not win";
}

TEST(Specialize, InputShapesWithBatch) {
  auto m = symbolic_model();
  auto shapes = input_shapes_with_batch(*m->graph, 3, {{"seq", 5}});
  EXPECT_EQ(shapes.at("x"), (Shape{3, 5, 4}));
  EXPECT_EQ(shapes.at("mask"), (Shape{3, 5}));
  EXPECT_FALSE(shapes.count("W"));
  // A symbol not given takes the default; "batch" is the batch wherever it appears.
  shapes = input_shapes_with_batch(*m->graph, 2);
  EXPECT_EQ(shapes.at("x"), (Shape{2, 1, 4}));
  EXPECT_THROW(input_shapes_with_batch(*m->graph, 0), Error);
}

}  // namespace
}  // namespace onyx
