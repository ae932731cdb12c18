// autodiff/memory_estimate.h: the planned peak replays the executor's order and lifetimes (each
// intermediate freed after its last reader, outputs held, views sharing their input's buffer),
// and value_sizes sizes a symbolic graph for concrete inputs without changing it.
#include <gtest/gtest.h>

#include "autodiff/memory_estimate.h"
#include "test_util.h"

namespace onyx::autodiff {
namespace {

// x [n, 256] float: a = Relu(x), b = Neg(a), r = Reshape(b) (a view), c = Exp(r), y = Add(c, a).
std::unique_ptr<Model> chain_model() {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("n"), Dim::fixed(256)});
  b.initializer("flat", Tensor::from_vector<int64_t>({1}, {-1}));
  b.node("Relu", {"x"}, {"a"});
  b.node("Neg", {"a"}, {"b"});
  b.node("Reshape", {"b", "flat"}, {"r"});
  b.node("Exp", {"r"}, {"c"});
  b.node("Add", {"c", "a"}, {"y"});
  b.output("y");
  return b.build();
}

TEST(MemoryEstimate, ReplaysLifetimesAndViews) {
  auto m = chain_model();
  ValueSizes sizes = value_sizes(*m, {{"x", {4, 256}}});
  const int64_t t = 4 * 256 * 4;  // one [4, 256] float tensor
  EXPECT_EQ(sizes.of(m->graph->find_value("a")), t);
  EXPECT_EQ(sizes.of(m->graph->find_value("y")), t);
  EXPECT_EQ(sizes.unknown, 0u);
  // The model is given back as it was: x is still symbolic.
  EXPECT_FALSE(m->graph->find_value("x")->type.shape->front().is_fixed());
  // a lives to the Add; b (and its view r) until Exp has run; at Exp a, b and c are alive,
  // at the Add a, c and y (b freed after Exp): the peak is 3 tensors, not the 4 a sum gives.
  EXPECT_EQ(planned_peak_bytes(*m->graph, [&](const Value* v) { return sizes.of(v); }), 3 * t);
}

TEST(MemoryEstimate, OutputsAreHeldToTheEnd) {
  // y = Relu(x) is an output; z = Neg(x); w = Neg(z) reads z: y, z and w overlap, z freed after w.
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{1024});
  b.node("Relu", {"x"}, {"y"});
  b.node("Neg", {"x"}, {"z"});
  b.node("Neg", {"z"}, {"w"});
  b.output("y").output("w");
  auto m = b.build();
  EXPECT_EQ(planned_peak_bytes(*m->graph, [](const Value*) { return int64_t(4096); }), 3 * 4096);
}

}  // namespace
}  // namespace onyx::autodiff
