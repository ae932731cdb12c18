// Finite-difference checks of the shape-op gradient rules (float64).
#include "grad_check.h"
#include "graph/error.h"
#include "save_reload_check.h"

namespace onyx::test {

using autodiff::Attrs;
using test::attr_int;
using test::attr_ints;
using test::attr_string;

namespace {

/// A 1-D int64 constant input.
GradInput I(std::string n, std::vector<double> v) {
  auto len = static_cast<int64_t>(v.size());
  return C(std::move(n), {len}, std::move(v));
}

}  // namespace

TEST(GradShape, ReshapeFlattenSqueezeUnsqueeze) {
  check_gradient({.op = "Reshape", .inputs = {P("x", {2, 3, 4}), I("s", {4, -1})}});
  check_gradient({.op = "Reshape", .inputs = {P("x", {2, 3, 4}), I("s", {0, 12})}});
  for (int64_t axis : {0, 1, 2, -1}) {
    SCOPED_TRACE(axis);
    check_gradient(
        {.op = "Flatten", .inputs = {P("x", {2, 3, 4})}, .attrs = {attr_int("axis", axis)}});
  }
  check_gradient({.op = "Squeeze", .inputs = {P("x", {2, 1, 3, 1}), I("a", {1, -1})}});
  check_gradient({.op = "Squeeze", .inputs = {P("x", {1, 3, 1})}});
  check_gradient({.op = "Unsqueeze", .inputs = {P("x", {2, 3}), I("a", {0, -1})}});
}

TEST(GradShape, Transpose) {
  check_gradient({.op = "Transpose", .inputs = {P("x", {2, 3, 4})}});
  check_gradient(
      {.op = "Transpose", .inputs = {P("x", {2, 3, 4})}, .attrs = {attr_ints("perm", {2, 0, 1})}});
  check_gradient({.op = "Transpose",
                  .inputs = {P("x", {2, 3, 4, 5})},
                  .attrs = {attr_ints("perm", {1, 3, 0, 2})}});
}

TEST(GradShape, Concat) {
  check_gradient({.op = "Concat",
                  .inputs = {P("a", {1, 3}), P("b", {2, 3}), P("c", {4, 3})},
                  .attrs = {attr_int("axis", 0)}});
  check_gradient({.op = "Concat",
                  .inputs = {P("a", {2, 1, 4}), P("b", {2, 3, 4})},
                  .attrs = {attr_int("axis", 1)}});
  check_gradient({.op = "Concat",
                  .inputs = {P("a", {2, 3, 2}), P("b", {2, 3, 1}), P("c", {2, 3, 3})},
                  .attrs = {attr_int("axis", -1)}});
  // One input fixed: only the other gets a gradient.
  check_gradient({.op = "Concat",
                  .inputs = {P("a", {2, 2}), C("k", {2, 3}, {1, 2, 3, 4, 5, 6}, DataType::Double)},
                  .attrs = {attr_int("axis", 1)}});
}

TEST(GradShape, Split) {
  // split as an input (opset 13+), uneven.
  check_gradient({.op = "Split",
                  .inputs = {P("x", {2, 6}), I("s", {1, 2, 3})},
                  .attrs = {attr_int("axis", 1)},
                  .outputs = 3,
                  .loss_outputs = {0, 1, 2}});
  // No split input: equal parts; one output unused (its gradient is zero).
  check_gradient({.op = "Split",
                  .inputs = {P("x", {4, 3})},
                  .attrs = {attr_int("axis", 0)},
                  .outputs = 2,
                  .loss_outputs = {1}});
  check_gradient({.op = "Split",
                  .inputs = {P("x", {3, 4})},
                  .attrs = {attr_int("axis", -1)},
                  .outputs = 2,
                  .loss_outputs = {0, 1}});
  // num_outputs attribute (opset 18), uneven last chunk.
  check_gradient({.op = "Split",
                  .inputs = {P("x", {5, 2})},
                  .attrs = {attr_int("axis", 0), attr_int("num_outputs", 3)},
                  .outputs = 3,
                  .loss_outputs = {0, 2},
                  .opset = 18});
}

namespace {

/// SplitToSequence(x, split) read by SequenceAt at each of `positions`; the reads summed
/// into one output when they have one shape, else returned apart.
std::function<std::vector<Value*>(Graph&)> indexed_sequence(std::optional<std::vector<int64_t>> split,
                                                            bool scalar_split, std::vector<Attribute> attrs,
                                                            std::vector<int64_t> positions) {
  return [=](Graph& g) -> std::vector<Value*> {
    std::vector<Value*> ins = {g.find_value("x")};
    if (split)
      ins.push_back(g.add_initializer(
          "split", scalar_split ? Tensor::scalar<int64_t>(split->at(0))
                                : Tensor::from_vector<int64_t>({int64_t(split->size())}, *split)));
    Value* seq = add(g, "SplitToSequence", ins, attrs);
    std::vector<Value*> outs;
    for (size_t i = 0; i < positions.size(); ++i) {
      Value* k = g.add_initializer("k" + std::to_string(i), Tensor::scalar<int64_t>(positions[i]));
      outs.push_back(add(g, "SequenceAt", {seq, k}));
    }
    return outs;
  };
}

}  // namespace

TEST(GradShape, SplitToSequenceReadByConstantPositions) {
  // torch.split / chunk / unbind as the dynamo exporter writes them unoptimized: training
  // lowers each read to a Slice (Gather for unbind), checked against the sequence kernels.
  // Scalar split with a short last piece; negative positions; one piece read twice.
  check_gradient({.op = "SplitToSequence",
                  .inputs = {P("x", {2, 7})},
                  .outputs = 4,
                  .loss_outputs = {0, 1, 2, 3},
                  .build = indexed_sequence(std::vector<int64_t>{3}, true, {attr_int("axis", 1)},
                                            {0, 2, -1, -3})});
  // Piece sizes, axis 0; the middle piece is never read (its gradient is zero).
  check_gradient({.op = "SplitToSequence",
                  .inputs = {P("x", {6, 2})},
                  .outputs = 2,
                  .loss_outputs = {0, 1},
                  .build = indexed_sequence(std::vector<int64_t>{1, 2, 3}, false, {}, {-1, 0})});
  // No split, keepdims 0 (unbind): squeezed pieces.
  check_gradient({.op = "SplitToSequence",
                  .inputs = {P("x", {3, 4})},
                  .outputs = 3,
                  .loss_outputs = {0, 1, 2},
                  .build = indexed_sequence(std::nullopt, false,
                                            {attr_int("axis", -1), attr_int("keepdims", 0)}, {0, -1, 2})});
  // No split, keepdims 1: pieces of one along the axis.
  check_gradient({.op = "SplitToSequence",
                  .inputs = {P("x", {3, 2, 2})},
                  .outputs = 1,
                  .build = indexed_sequence(std::nullopt, false, {attr_int("axis", 1)}, {1})});
}

TEST(GradShape, SplitToSequenceLengthBecomesAConstant) {
  check_gradient({.op = "SplitToSequence",
                  .inputs = {P("x", {5, 3})},
                  .build = [](Graph& g) -> std::vector<Value*> {
                    Value* seq = add(g, "SplitToSequence",
                                     {g.find_value("x"), g.add_initializer("two", Tensor::scalar<int64_t>(2))});
                    Value* n = add(g, "SequenceLength", {seq});
                    Value* last = add(g, "SequenceAt", {seq, g.add_initializer("k", Tensor::scalar<int64_t>(-1))});
                    Value* nd = add(g, "Cast", {n}, {attr_int("to", int64_t(DataType::Double))});
                    return {add(g, "Mul", {last, nd})};  // [1, 3] * 3
                  }});
}

TEST(GradShape, SliceUnitSteps) {
  // starts/ends only (all leading axes), negative and clamped bounds: the Pad path.
  check_gradient({.op = "Slice", .inputs = {P("x", {4, 5}), I("b", {1, -4}), I("e", {100, -1})}});
  check_gradient(
      {.op = "Slice", .inputs = {P("x", {3, 4, 5}), I("b", {1}), I("e", {4}), I("a", {-1})}});
  check_gradient({.op = "Slice",
                  .inputs = {P("x", {3, 4, 5}), I("b", {0, 2}), I("e", {2, 3}), I("a", {2, 0}),
                             I("s", {1, 1})}});
  // Empty slice: zero gradient.
  check_gradient(
      {.op = "Slice", .inputs = {P("x", {3, 4}), I("b", {2}), I("e", {1}), I("a", {1})}});
}

TEST(GradShape, SliceStridedAndNegativeSteps) {
  check_gradient(
      {.op = "Slice",
       .inputs = {P("x", {4, 7}), I("b", {0, 1}), I("e", {4, 7}), I("a", {0, 1}), I("s", {2, 3})}});
  // Reversal and negative strides with clamped starts.
  check_gradient(
      {.op = "Slice",
       .inputs = {P("x", {3, 5}), I("b", {-1}), I("e", {-100}), I("a", {1}), I("s", {-1})}});
  check_gradient({.op = "Slice",
                  .inputs = {P("x", {5, 6}), I("b", {100, 4}), I("e", {0, -100}), I("a", {-2, 1}),
                             I("s", {-2, -3})}});
}

TEST(GradShape, GatherRows) {
  // Embedding lookup: repeated and negative indices accumulate into the same row.
  check_gradient({.op = "Gather", .inputs = {P("w", {5, 3}), C("i", {2, 3}, {0, 4, 0, -1, 2, 2})}});
  check_gradient({.op = "Gather", .inputs = {P("w", {5, 3}), C("i", {}, {-2})}});
  check_gradient(
      {.op = "Gather", .inputs = {P("w", {4, 2}), C("i", {3}, {1, 1, 3}, DataType::Int32)}});
}

TEST(GradShape, GatherOtherAxes) {
  check_gradient({.op = "Gather",
                  .inputs = {P("x", {2, 4, 3}), C("i", {2, 2}, {3, -1, 0, 3})},
                  .attrs = {attr_int("axis", 1)}});
  check_gradient({.op = "Gather",
                  .inputs = {P("x", {2, 4, 3}), C("i", {4}, {2, 0, 2, -3})},
                  .attrs = {attr_int("axis", -1)}});
  check_gradient(
      {.op = "Gather", .inputs = {P("x", {3, 4}), C("i", {}, {1})}, .attrs = {attr_int("axis", 1)}});
}

TEST(GradShape, GatherNeedsOpset16) {
  try {
    check_gradient({.op = "Gather", .inputs = {P("w", {5, 3}), C("i", {2}, {0, 1})}, .opset = 15});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opset 16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[autodiff]"), std::string::npos) << e.what();
  }
}

TEST(GradShape, GatherElements) {
  check_gradient({.op = "GatherElements",
                  .inputs = {P("x", {3, 3}), C("i", {2, 3}, {0, 2, 0, 0, 2, 1})},
                  .attrs = {attr_int("axis", 0)}});
  check_gradient({.op = "GatherElements",
                  .inputs = {P("x", {2, 3}), C("i", {2, 2}, {2, 2, -1, 0})},
                  .attrs = {attr_int("axis", 1)}});
  EXPECT_THROW(check_gradient({.op = "GatherElements",
                               .inputs = {P("x", {2, 2}), C("i", {2, 2}, {0, 1, 1, 0})},
                               .opset = 14}),
               Error);
}

TEST(GradShape, Expand) {
  check_gradient({.op = "Expand", .inputs = {P("x", {3, 1}), I("s", {2, 3, 4})}});
  check_gradient({.op = "Expand", .inputs = {P("x", {}), I("s", {2, 2})}});
  check_gradient({.op = "Expand", .inputs = {P("x", {2, 3}), I("s", {1, 1})}});
}

TEST(GradShape, Tile) {
  check_gradient({.op = "Tile", .inputs = {P("x", {2, 3}), I("r", {2, 1})}});
  check_gradient({.op = "Tile", .inputs = {P("x", {2, 3}), I("r", {3, 2})}});
  check_gradient({.op = "Tile", .inputs = {P("x", {2, 1, 3}), I("r", {1, 4, 2})}});
}

TEST(GradShape, PadConstant) {
  check_gradient({.op = "Pad", .inputs = {P("x", {2, 3}), I("p", {1, 0, 2, 3})}});
  // Negative pads crop; a constant value does not change the gradient.
  check_gradient(
      {.op = "Pad",
       .inputs = {P("x", {3, 4}), I("p", {-1, 2, 1, -2}), C("v", {}, {1.5}, DataType::Double)}});
  // axes input (opset 18).
  check_gradient({.op = "Pad",
                  .inputs = {P("x", {2, 3, 4}), I("p", {1, -1, 2, 0}), None(), I("a", {-1, 0})},
                  .opset = 18});
}

TEST(GradShape, PadReflectEdgeWrap) {
  for (const char* mode : {"reflect", "edge"}) {
    SCOPED_TRACE(mode);
    check_gradient({.op = "Pad",
                    .inputs = {P("x", {3, 4}), I("p", {2, 1, 1, 3})},
                    .attrs = {attr_string("mode", mode)}});
    check_gradient({.op = "Pad",
                    .inputs = {P("x", {2, 3, 4}), I("p", {1, 0, 2, 2, 1, 3})},
                    .attrs = {attr_string("mode", mode)},
                    .opset = 18});
    check_gradient({.op = "Pad",
                    .inputs = {P("x", {2, 3, 4}), I("p", {2, 1, 0, 3}), None(), I("a", {2, 1})},
                    .attrs = {attr_string("mode", mode)},
                    .opset = 18});
  }
  check_gradient({.op = "Pad",
                  .inputs = {P("x", {3, 4}), I("p", {2, 5, 1, 3})},
                  .attrs = {attr_string("mode", "wrap")},
                  .opset = 19});
  EXPECT_THROW(check_gradient({.op = "Pad",
                               .inputs = {P("x", {3, 4}), I("p", {1, 1, 1, 1})},
                               .attrs = {attr_string("mode", "reflect")},
                               .opset = 15}),
               Error);
}

TEST(GradShape, DepthToSpaceAndSpaceToDepth) {
  for (const char* mode : {"DCR", "CRD"}) {
    SCOPED_TRACE(mode);
    check_gradient({.op = "DepthToSpace",
                    .inputs = {P("x", {2, 8, 2, 3})},
                    .attrs = {attr_int("blocksize", 2), attr_string("mode", mode)}});
    check_gradient({.op = "DepthToSpace",
                    .inputs = {P("x", {1, 18, 2, 1})},
                    .attrs = {attr_int("blocksize", 3), attr_string("mode", mode)}});
  }
  check_gradient({.op = "DepthToSpace",
                  .inputs = {P("x", {1, 4, 3, 2})},
                  .attrs = {attr_int("blocksize", 2)}});
  check_gradient({.op = "SpaceToDepth",
                  .inputs = {P("x", {2, 2, 4, 6})},
                  .attrs = {attr_int("blocksize", 2)}});
  check_gradient({.op = "SpaceToDepth",
                  .inputs = {P("x", {1, 3, 3, 6})},
                  .attrs = {attr_int("blocksize", 3)}});
  // CRD with a shape shape inference cannot tell (a Reshape to a computed shape): the
  // backward reads x's dims at run time.
  check_gradient({.op = "DepthToSpace",
                  .inputs = {P("x", {2, 8, 2, 3}), I("s0", {2, 8, 2, 3})},
                  .build = [](Graph& g) -> std::vector<Value*> {
                    Value* shape = add(g, "Identity", {g.find_value("s0")});
                    Value* r = add(g, "Reshape", {g.find_value("x"), shape});
                    return {add(g, "DepthToSpace", {r},
                                {attr_int("blocksize", 2), attr_string("mode", "CRD")})};
                  }});
}

TEST(GradShape, TriluUpperLowerAndK) {
  for (int64_t upper : {0, 1}) {
    check_gradient({.op = "Trilu",
                    .inputs = {P("x", {3, 4})},
                    .attrs = {attr_int("upper", upper)},
                    .opset = 14});
    for (double k : {-1.0, 0.0, 2.0, 5.0, -4.0}) {
      SCOPED_TRACE(fmt::format("upper {} k {}", upper, k));
      check_gradient({.op = "Trilu",
                      .inputs = {P("x", {2, 4, 3}), C("k", {}, {k})},
                      .attrs = {attr_int("upper", upper)},
                      .opset = 14});
    }
  }
  check_gradient({.op = "Trilu", .inputs = {P("x", {4, 4})}, .opset = 14});  // upper by default
}

TEST(GradShape, GatherNDRepeatsAndBatchDims) {
  // Element tuples (a repeat accumulates, a negative index wraps), row slices, and batch_dims 1
  // and 2 (the gathered-ids path).
  check_gradient(
      {.op = "GatherND", .inputs = {P("x", {3, 4}), C("i", {4, 2}, {0, 1, 2, 3, 0, 1, -1, -4})}});
  check_gradient({.op = "GatherND", .inputs = {P("x", {3, 4, 2}), C("i", {3, 1}, {2, 0, 2})}});
  check_gradient(
      {.op = "GatherND",
       .inputs = {P("x", {3, 4, 2}), C("i", {2, 2, 3}, {0, 1, 1, 2, 3, 0, 0, 1, 1, 1, 0, 1})}});
  check_gradient({.op = "GatherND",
                  .inputs = {P("x", {2, 3, 4}), C("i", {2, 3, 1}, {0, 2, 2, 1, -1, 1})},
                  .attrs = {attr_int("batch_dims", 1)}});
  check_gradient({.op = "GatherND",
                  .inputs = {P("x", {2, 3, 4}), C("i", {2, 2, 2}, {0, 3, 0, 3, 1, 1, 2, 0})},
                  .attrs = {attr_int("batch_dims", 1)}});
  check_gradient({.op = "GatherND",
                  .inputs = {P("x", {2, 3, 4}), C("i", {2, 3, 1}, {1, 3, 0, 3, 2, 0})},
                  .attrs = {attr_int("batch_dims", 2)}});
  check_gradient(
      {.op = "GatherND",
       .inputs = {P("x", {2, 3, 4}), C("i", {2, 3, 2, 1}, {1, 1, 0, 3, 1, 1, 2, 0, 1, 2, 2, 0})},
       .attrs = {attr_int("batch_dims", 2)}});
}

TEST(GradShape, ScatterNDDataAndUpdates) {
  // reduction none (unique indices: the written slices take no gradient from data) and add
  // (repeats accumulate into data, each update gets its slice of dy).
  for (const char* red : {"none", "add"}) {
    SCOPED_TRACE(red);
    Attrs a = {attr_string("reduction", red)};
    check_gradient({.op = "ScatterND",
                    .inputs = {P("x", {4, 3}), C("i", {2, 1}, {1, 3}), P("u", {2, 3})},
                    .attrs = a});
    check_gradient({.op = "ScatterND",
                    .inputs = {P("x", {4, 3}), C("i", {3, 2}, {0, 2, 3, 1, -1, 0}), P("u", {3})},
                    .attrs = a});
    check_gradient({.op = "ScatterND",
                    .inputs = {P("x", {2, 3, 2}), C("i", {1, 2, 1}, {1, 0}), P("u", {1, 2, 3, 2})},
                    .attrs = a});
  }
  check_gradient({.op = "ScatterND",
                  .inputs = {P("x", {4, 3}), C("i", {3, 1}, {1, 3, 1}), P("u", {3, 3})},
                  .attrs = {attr_string("reduction", "add")}});
  check_gradient({.op = "ScatterND",
                  .inputs = {P("x", {4, 3}), C("i", {2, 1}, {2, 0}), P("u", {2, 3})},
                  .opset = 13});
}

TEST(GradShape, ScatterElementsDataAndUpdates) {
  auto idx = C("i", {2, 3}, {1, 0, 2, 0, 2, 1});  // unique per column and per row
  for (int64_t axis : {0, 1, -1, -2})
    for (const char* red : {"none", "add"}) {
      SCOPED_TRACE(fmt::format("axis {} {}", axis, red));
      check_gradient({.op = "ScatterElements",
                      .inputs = {P("x", {3, 3}), idx, P("u", {2, 3})},
                      .attrs = {attr_int("axis", axis), attr_string("reduction", red)}});
    }
  check_gradient({.op = "ScatterElements",
                  .inputs = {P("x", {3, 4}), C("i", {2, 3}, {1, 1, 0, 1, 0, 0}), P("u", {2, 3})},
                  .attrs = {attr_int("axis", 1), attr_string("reduction", "add")}});
  check_gradient(
      {.op = "ScatterElements", .inputs = {P("x", {3, 3}), idx, P("u", {2, 3})}, .opset = 13});
}

TEST(GradShape, ScatterMulIsRefused) {
  EXPECT_THROW(check_gradient({.op = "ScatterND",
                               .inputs = {P("x", {4, 3}), C("i", {2, 1}, {1, 3}), P("u", {2, 3})},
                               .attrs = {attr_string("reduction", "mul")}}),
               Error);
}

TEST(GradShape, TopKValues) {
  // Random values: no ties.
  for (int64_t axis : {-1, 0, 1})
    for (int64_t largest : {0, 1})
      for (int64_t sorted : {0, 1}) {
        SCOPED_TRACE(fmt::format("axis {} largest {} sorted {}", axis, largest, sorted));
        check_gradient({.op = "TopK",
                        .inputs = {P("x", {3, 5}), I("k", {2})},
                        .attrs = {attr_int("axis", axis), attr_int("largest", largest),
                                  attr_int("sorted", sorted)},
                        .outputs = 2});
      }
  check_gradient({.op = "TopK", .inputs = {P("x", {2, 3, 4}), I("k", {3})}, .outputs = 2});
  check_gradient({.op = "TopK", .inputs = {P("x", {6}), I("k", {6})}, .outputs = 2});
}

TEST(GradShape, ReverseSequence) {
  // time-major (time 0, batch 1) and batch-major, full and partial lengths.
  check_gradient({.op = "ReverseSequence", .inputs = {P("x", {4, 2, 3}), I("len", {3, 1})}});
  check_gradient({.op = "ReverseSequence",
                  .inputs = {P("x", {3, 4, 2}), I("len", {4, 2, 1})},
                  .attrs = {attr_int("batch_axis", 0), attr_int("time_axis", 1)}});
}

TEST(GradShape, CenterCropPad) {
  // Crop one axis and pad the other, by odd and even amounts; axes (negative too) select dims.
  check_gradient({.op = "CenterCropPad", .inputs = {P("x", {4, 5}), I("s", {3, 8})}, .opset = 18});
  check_gradient({.op = "CenterCropPad", .inputs = {P("x", {5, 2}), I("s", {2, 5})}, .opset = 18});
  check_gradient({.op = "CenterCropPad",
                  .inputs = {P("x", {2, 5, 3}), I("s", {2, 6})},
                  .attrs = {attr_ints("axes", {1, -1})},
                  .opset = 18});
  check_gradient({.op = "CenterCropPad",
                  .inputs = {P("x", {2, 5, 3}), I("s", {3})},
                  .attrs = {attr_ints("axes", {1})},
                  .opset = 18});
}

TEST(GradShape, IntegerOutputsPruneCleanly) {
  // ArgMax / ArgMin / NonZero / Shape / Size of a trained tensor feed indices, shapes and
  // counts; no gradient flows through them and the builder does not ask for rules.
  auto x = PV("x", {3, 4}, {0.3, -0.8, 0.5, 0.1, -0.4, 0.9, -0.1, 0.7, 0.2, -0.6, 0.05, -0.3});
  check_gradient(
      {.op = "graph", .inputs = {x, P("w", {4, 2})}, .build = [](Graph& g) -> std::vector<Value*> {
         Value *x = g.find_value("x"), *w = g.find_value("w");
         auto as_double = [&](Value* v) {
           return add(g, "Cast", {v}, {attr_int("to", int64_t(DataType::Double))});
         };
         Value* am = add(g, "ArgMax", {x}, {attr_int("axis", 1), attr_int("keepdims", 0)});
         Value* rows = add(g, "Gather", {w, am});                   // [3, 2]
         Value* an = add(g, "ArgMin", {x}, {attr_int("axis", 0)});  // [1, 4]
         Value* zero = g.add_initializer("zero", Tensor::scalar<double>(0.0));
         Value* nz = add(g, "NonZero", {add(g, "Greater", {x, zero})});
         Value* count = as_double(add(g, "Size", {nz}));
         Value* shaped = add(
             g, "Reshape", {add(g, "Transpose", {add(g, "Transpose", {x})}), add(g, "Shape", {x})});
         Value* scaled = add(g, "Mul", {add(g, "Mul", {shaped, as_double(an)}), count});
         Value* s = add(g, "ReduceSum", {scaled}, {attr_int("keepdims", 0)});
         Value* mixed = add(g, "Mul", {add(g, "MatMul", {x, w}), s});  // [3, 2]
         return {add(g, "Add", {mixed, rows})};
       }});
}

TEST(GradShape, ChainWithRunTimeShapes) {
  // Shape inference leaves the Slice/Pad outputs unshaped, and the pads/repeats come from
  // Identity nodes, so Concat, Pad, Tile and Reshape take their run-time paths.
  auto build = [](Graph& g) {
    auto ints = [&](const std::string& n, std::vector<int64_t> v) {
      Value* init =
          g.add_initializer(n + "_init", Tensor::from_vector<int64_t>({int64_t(v.size())}, v));
      Value* out = g.get_or_add_value(n);
      g.add_node("Identity", {init}, {out}, "", n);
      return out;
    };
    auto node = [&](const std::string& op, std::vector<Value*> ins, autodiff::Attrs attrs = {}) {
      Value* out = g.add_unique_value(op + "_out");
      Node* n = g.add_node(op, ins, {out}, "", out->name);
      for (auto& a : attrs) n->attrs[a.name] = a;
      return out;
    };
    Value* s = node("Slice", {g.find_value("x"), ints("b", {-1}), ints("e", {-100}), ints("a", {1}),
                              ints("st", {-2})});                                          // [3,2]
    Value* cc = node("Concat", {s, g.find_value("y")}, {attr_int("axis", 1)});               // [3,5]
    Value* pc = node("Pad", {cc, ints("pc", {1, -1, 0, 2})});                              // [4,6]
    Value* pr = node("Pad", {pc, ints("pr", {0, 2, 1, 1})}, {attr_string("mode", "reflect")});  // [5,9]
    Value* tl = node("Tile", {pr, ints("rep", {2, 1})});                                   // [10,9]
    Value* rs = node("Reshape", {tl, ints("shape", {9, 10})});
    return std::vector<Value*>{node("Transpose", {rs})};
  };
  check_gradient({.op = "chain", .inputs = {P("x", {3, 4}), P("y", {3, 3})}, .build = build});
}

TEST(GradShape, MultiOpGraphSavesAndReloads) {
  // x[4,6] -> Reshape[2,12] -> Transpose -> Slice(step -2) -> Concat with a Gather of an
  // embedding -> Pad(edge) -> Tile -> a scalar loss.
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("shape_chain");
  Graph& g = *m->graph;
  std::vector<double> xv(24), ev(15);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.1 * static_cast<double>(i) - 1.0;
  for (size_t i = 0; i < ev.size(); ++i) ev[i] = 0.05 * static_cast<double>(i * i % 7) - 0.2;
  auto ints = [&](const std::string& n, std::vector<int64_t> v) {
    return g.add_initializer(n, Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  };
  Value* x = g.add_initializer("x", Tensor::from_vector<double>({4, 6}, xv));
  Value* emb = g.add_initializer("emb", Tensor::from_vector<double>({5, 3}, ev));
  auto node = [&](const std::string& op, std::vector<Value*> ins, autodiff::Attrs attrs = {}) {
    Value* out = g.add_unique_value(op + "_out");
    Node* n = g.add_node(op, ins, {out}, "", out->name);
    for (auto& a : attrs) n->attrs[a.name] = a;
    return out;
  };
  Value* r = node("Reshape", {x, ints("s", {2, 12})});
  Value* t = node("Transpose", {r});  // [12,2]
  Value* s = node(
      "Slice", {t, ints("b", {-1}), ints("e", {-100}), ints("a", {0}), ints("st", {-2})});  // [6,2]
  Value* ge = node("Gather", {emb, ints("idx", {1, 1, 4, 0, -1, 2})});                      // [6,3]
  Value* cc = node("Concat", {s, ge}, {attr_int("axis", 1)});                                 // [6,5]
  Value* pd = node("Pad", {cc, ints("p", {1, 0, 0, 2})}, {attr_string("mode", "edge")});         // [7,7]
  Value* tl = node("Tile", {pd, ints("rep", {1, 2})});  // [7,14]
  Value* sq = node("Mul", {tl, tl});
  Value* L = g.get_or_add_value("L");
  g.add_node("ReduceSum", {sq}, {L}, "", "L")->attrs["keepdims"] = attr_int("keepdims", 0);
  g.outputs.push_back(L);
  expect_same_after_save_reload(*m, {.kind = "output", .output = "L"}, {"x", "emb"});
}

}  // namespace onyx::test
