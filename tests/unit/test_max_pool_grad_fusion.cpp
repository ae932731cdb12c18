// The MaxPool gradient's fusion (inference/fusions_max_pool_grad.cpp) and the ai.onyx
// MaxPoolGrad kernel (kernels/cpu/max_pool_grad.cpp): the MaxPool rule's scatter-add of dY into
// zeros at the argmax Indices becomes one MaxPoolGrad with the same bits (ties and overlapping
// windows, 1 and 2 threads, a dynamic batch and a fixed one whose zeros fold to a constant, float
// and the 16-bit floats); a scatter that does not read MaxPool's Indices is
// left alone; Indices outside their plane are an onyx::Error and the session stays usable.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx::test {
namespace {

/// (x [batch, 3, 9, 9] + p) * s (p a full-size offset, 0, s a per-channel scale: the parameters)
/// -> MaxPool 3x3 stride 2 pad 1 (ResNet's, overlapping windows) -> product with c, summed: the
/// training graph for p and s differentiates the MaxPool with its rule (p's gradient is the
/// pool's input gradient times s, element by element).
/// With a 16-bit `dt` the pool runs in it (Casts around it, as mixed precision writes them), and
/// so does its gradient's scatter. With `fixed_batch` (5) constant folding turns the rule's
/// Expand of zeros into a constant.
autodiff::TrainingGraph pool_training_graph(DataType dt = DataType::Float, bool fixed_batch = false) {
  ModelBuilder b(17);
  b.input("x", DataType::Float,
          SymShape{fixed_batch ? Dim::fixed(5) : Dim::symbol("batch"), Dim::fixed(3), Dim::fixed(9),
                   Dim::fixed(9)});
  b.initializer("s", randn({1, 3, 1, 1}, 1, 0.5));
  b.initializer("p", Tensor::zeros(DataType::Float, {1, 3, 9, 9}));  // keeps x's ties
  b.initializer("c", randn({3, 5, 5}, 2));
  b.node("Add", {"x", "p"}, {"xp"});
  b.node("Mul", {"xp", "s"}, {"xs"});
  std::string pooled = "xs", out = "y";
  if (dt != DataType::Float) {
    b.node("Cast", {"xs"}, {"xs16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    b.node("Cast", {"y16"}, {"y"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
    pooled = "xs16", out = "y16";
  }
  Node& pool = b.node("MaxPool", {pooled}, {out});
  pool.attrs["kernel_shape"] = attr_ints("kernel_shape", {3, 3});
  pool.attrs["strides"] = attr_ints("strides", {2, 2});
  pool.attrs["pads"] = attr_ints("pads", {1, 1, 1, 1});
  b.node("Mul", {"y", "c"}, {"yc"});
  b.node("ReduceSum", {"yc"}, {"loss"}).attrs["keepdims"] = attr_int("keepdims", 0);
  b.output("loss");
  auto m = b.build();
  return autodiff::build_training_graph(*m, {.kind = "output"}, {"s", "p"});
}

}  // namespace

TEST(MaxPoolGradFusion, TrainingGraphsPoolGradientBecomesOneMaxPoolGradWithTheSameBits) {
  for (bool fixed_batch : {false, true})
    for (DataType dt : {DataType::Float, DataType::BFloat16, DataType::Float16}) {
      SCOPED_TRACE(fmt::format("{} fixed batch {}", dtype_name(dt), fixed_batch));
      const autodiff::TrainingGraph tg = pool_training_graph(dt, fixed_batch);
      const Session unfused = session_of(*tg.model, OptLevel::None);
      EXPECT_EQ(op_counts(unfused)[":ScatterElements"], 1);
      // Ties: whole rows of equal values, so windows share maxima and indices repeat.
      Tensor x = randn({5, 3, 9, 9}, 4);
      for (int j = 0; j < 9 * 9; ++j) x.data<float>()[j] = 0.25f;
      for (int j = 0; j < 9; ++j) x.data<float>()[3 * 81 + 9 + j] = 1.5f;
      for (int threads : {1, 2}) {
        const Session fused = session_of(*tg.model, OptLevel::All, threads);
        auto ops = op_counts(fused);
        EXPECT_EQ(ops["ai.onyx:MaxPoolGrad"], 1);
        EXPECT_EQ(ops[":ScatterElements"], 0);
        const NamedTensors a = fused.run({{"x", x}}), b = unfused.run({{"x", x}});
        ASSERT_EQ(tg.grads.size(), 2u);
        for (const std::string& name : {tg.loss, tg.grads[0], tg.grads[1]})
          expect_same_bits(a.at(name), b.at(name), name + " threads " + std::to_string(threads));
      }
    }
}

TEST(MaxPoolGradFusion, ScatterOfOtherIndicesIsLeftAlone) {
  // The same scatter-add of zeros, with indices that are a graph input rather than MaxPool's.
  ModelBuilder b(17);
  b.input("i", DataType::Int64, Shape{1, 2, 2, 2}).input("dy", DataType::Float, Shape{1, 2, 2, 2});
  b.initializer("zero", Tensor::scalar<float>(0.0f));
  b.initializer("size", Tensor::from_vector<int64_t>({1}, {32}));
  b.initializer("flat", Tensor::from_vector<int64_t>({1}, {-1}));
  b.node("Expand", {"zero", "size"}, {"zeros"});
  b.node("Reshape", {"i", "flat"}, {"i_flat"});
  b.node("Reshape", {"dy", "flat"}, {"dy_flat"});
  Node& s = b.node("ScatterElements", {"zeros", "i_flat", "dy_flat"}, {"dx"});
  s.attrs["axis"] = attr_int("axis", 0);
  s.attrs["reduction"] = Attribute::of_string("reduction", "add");
  b.output("dx");
  EXPECT_EQ(op_counts(b.session())["ai.onyx:MaxPoolGrad"], 0);
}

TEST(MaxPoolGradFusion, KernelRefusesIndicesOutsideTheirPlane) {
  ModelBuilder b(17, "ai.onyx");
  b.input("dy", DataType::Float, Shape{1, 2, 1, 2}).input("i", DataType::Int64, Shape{1, 2, 1, 2});
  b.initializer("size", Tensor::from_vector<int64_t>({1}, {8}));
  b.node("MaxPoolGrad", {"dy", "i", "size"}, {"dx"}, "ai.onyx");
  b.output("dx");
  Session s = b.session();
  const Tensor dy = Tensor::from_vector<float>({1, 2, 1, 2}, {1, 2, 3, 4});
  // Two planes of 4: plane 0 owns [0, 4), plane 1 [4, 8). Index 5 in plane 0 is not a MaxPool's.
  try {
    s.run({{"dy", dy}, {"i", Tensor::from_vector<int64_t>({1, 2, 1, 2}, {0, 5, 4, 4})}});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside its plane [0, 4)"), std::string::npos) << e.what();
  }
  // The session still runs valid indices: repeated ones add up.
  const NamedTensors out =
      s.run({{"dy", dy}, {"i", Tensor::from_vector<int64_t>({1, 2, 1, 2}, {1, 1, 4, 7})}});
  EXPECT_EQ(out.at("dx").to_double_vector(), (std::vector<double>{0, 3, 0, 0, 3, 0, 0, 4}));
}

}  // namespace onyx::test
