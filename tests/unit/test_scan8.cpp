// Scan at opset 8: a batch axis, per-row sequence_lens and zero padding of scan outputs.
#include "test_util.h"

using namespace onyx;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;
using onyx::test::T_;

namespace {

/// Scan-8 running a cumulative sum: state [2], scan input [batch, 3, 2].
Session cumsum_session() {
  ModelBuilder b(8);
  b.input("lens", DataType::Int64, Shape{2});
  b.input("init", DataType::Float, Shape{2, 2});
  b.input("x", DataType::Float, Shape{2, 3, 2});
  Node& scan = b.node("Scan", {"lens", "init", "x"}, {"sum", "partial"});
  auto body = std::make_shared<Graph>("body");
  Value* in = body->get_or_add_value("sum_in");
  Value* next = body->get_or_add_value("next");
  Value* out = body->get_or_add_value("sum_out");
  Value* copy = body->get_or_add_value("scan_out");
  body->inputs = {in, next};
  body->add_node("Add", {in, next}, {out});
  body->add_node("Identity", {out}, {copy});
  body->outputs = {out, copy};
  Attribute g;
  g.name = "body";
  g.type = Attribute::Type::Graph;
  g.g = body;
  scan.attrs["body"] = g;
  scan.attrs["num_scan_inputs"] = onyx::test::attr_int("num_scan_inputs", 1);
  b.output("sum").output("partial");
  return b.session();
}

const Tensor kInit = T_({2, 2}, {0, 0, 100, 100});
const Tensor kX = T_({2, 3, 2}, {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60});

TEST(Scan8, EachBatchRowRunsItsOwnLength) {
  Session s = cumsum_session();
  auto y = s.run({{"lens", T_<int64_t>({2}, {3, 1})}, {"init", kInit}, {"x", kX}});
  expect_near(y.at("sum"), {9, 12, 110, 120});
  // Row 1 stops after one step; the rest of its scan output is zero.
  expect_near(y.at("partial"), {1, 2, 4, 6, 9, 12, 110, 120, 0, 0, 0, 0});
}

TEST(Scan8, SequenceLengthBeyondTheInputIsAnError) {
  Session s = cumsum_session();
  EXPECT_THROW(s.run({{"lens", T_<int64_t>({2}, {4, 1})}, {"init", kInit}, {"x", kX}}), Error);
}

}  // namespace
