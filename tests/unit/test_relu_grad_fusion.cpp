// The ReLU gradient's fusion (inference/fusions_relu_grad.cpp) and the ai.onyx ReluGrad kernel
// (kernels/cpu/relu_grad.cpp): the Relu rule's Where(Greater(Y, 0), dY, 0) in a training graph
// becomes one ReluGrad with the same bits; look-alikes (another threshold or fill, a broadcast
// dY, a mask read elsewhere) are left alone; the kernel selects dY's bits in every float type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx::test {
namespace {

/// x [batch, 16] (a graph input) -> Relu(MatMul(x, w) + b) -> ReduceSum of its product with c:
/// the training graph for w and b differentiates the Relu with its rule.
autodiff::TrainingGraph relu_training_graph() {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(16)});
  b.initializer("w", randn({16, 33}, 1, 0.5));
  b.initializer("bias", randn({33}, 2, 0.5));
  b.initializer("c", randn({33}, 3));
  b.node("MatMul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "bias"}, {"h"});
  b.node("Relu", {"h"}, {"y"});
  b.node("Mul", {"y", "c"}, {"yc"});
  b.node("ReduceSum", {"yc"}, {"loss"}).attrs["keepdims"] = attr_int("keepdims", 0);
  b.output("loss");
  auto m = b.build();
  return autodiff::build_training_graph(*m, {.kind = "output"}, {"w", "bias"});
}

}  // namespace

TEST(ReluGradFusion, TrainingGraphsReluGradientBecomesOneReluGradWithTheSameBits) {
  const autodiff::TrainingGraph tg = relu_training_graph();
  SessionOptions plain;
  plain.opt_level = OptLevel::None;
  Session fused(clone_model(*tg.model)), unfused(clone_model(*tg.model), plain);
  auto ops = op_counts(fused);
  EXPECT_EQ(ops["ai.onyx:ReluGrad"], 1);
  EXPECT_EQ(ops[":Greater"], 0);
  EXPECT_EQ(ops[":Where"], 0);
  EXPECT_EQ(op_counts(unfused)[":Where"], 1);
  // Inputs whose pre-activations include exact zeros (a zero row of x), a dynamic batch of 5.
  Tensor x = randn({5, 16}, 4);
  for (int j = 0; j < 16; ++j) x.data<float>()[16 + j] = 0.0f;
  const NamedTensors a = fused.run({{"x", x}}), b = unfused.run({{"x", x}});
  for (const std::string& name : {tg.loss, tg.grads[0], tg.grads[1]})
    expect_same_bits(a.at(name), b.at(name), name);
}

TEST(ReluGradFusion, LookalikesAreLeftAlone) {
  // Where(Greater(y, t), dy, f) over y and dy of shapes `ys` and `dys`; the mask also an output
  // with `mask_out`.
  auto session = [](double threshold, double fill, const Shape& ys, const Shape& dys,
                    bool mask_out) {
    ModelBuilder b(17);
    b.input("y", DataType::Float, ys).input("dy", DataType::Float, dys);
    b.initializer("t", Tensor::scalar<float>(static_cast<float>(threshold)));
    b.initializer("f", Tensor::scalar<float>(static_cast<float>(fill)));
    b.node("Greater", {"y", "t"}, {"mask"});
    b.node("Where", {"mask", "dy", "f"}, {"dx"});
    b.output("dx");
    if (mask_out) b.output("mask");
    return b.session();
  };
  const Shape s{4, 6};
  EXPECT_EQ(op_counts(session(0.0, 0.0, s, s, false))["ai.onyx:ReluGrad"], 1);
  EXPECT_EQ(op_counts(session(-0.0, 0.0, s, s, false))["ai.onyx:ReluGrad"], 1);
  EXPECT_EQ(op_counts(session(0.5, 0.0, s, s, false))["ai.onyx:ReluGrad"], 0);   // threshold
  EXPECT_EQ(op_counts(session(0.0, 1.0, s, s, false))["ai.onyx:ReluGrad"], 0);   // fill
  EXPECT_EQ(op_counts(session(0.0, -0.0, s, s, false))["ai.onyx:ReluGrad"], 0);  // -0 fill
  EXPECT_EQ(op_counts(session(0.0, 0.0, s, {1, 6}, false))["ai.onyx:ReluGrad"], 0);  // broadcast
  EXPECT_EQ(op_counts(session(0.0, 0.0, s, s, true))["ai.onyx:ReluGrad"], 0);   // mask read
  // Unknown dims (no symbol names them) may differ at run time: not fused.
  ModelBuilder b(17);
  b.input("y", DataType::Float, SymShape{Dim{}, Dim::fixed(6)});
  b.input("dy", DataType::Float, SymShape{Dim{}, Dim::fixed(6)});
  b.initializer("z", Tensor::scalar<float>(0.0f));
  b.node("Greater", {"y", "z"}, {"mask"});
  b.node("Where", {"mask", "dy", "z"}, {"dx"});
  b.output("dx");
  EXPECT_EQ(op_counts(b.session())["ai.onyx:ReluGrad"], 0);
}

// ReluGrad(dY, Y) gives Where(Greater(Y, 0), dY, 0)'s bits in every float type, with zeros of
// both signs, infinities and NaN in Y and in dY, over a length no vector or block width divides.
TEST(ReluGradFusion, KernelSelectsTheGradientsBitsInEveryFloatType) {
  const int64_t n = 3 * 1000 + 7;
  Tensor y = random_normal({n}, 5), dy = random_normal({n}, 6);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1e-30f, -1e-30f};
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) {
      y.data<float>()[i * 7 + j] = specials[i];
      dy.data<float>()[i * 7 + j] = specials[j];
    }
  for (DataType dt : {DataType::Float, DataType::Double, DataType::BFloat16, DataType::Float16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto session = [dt](bool fused_op) {
      ModelBuilder b(17, "ai.onyx");
      b.input("dy", DataType::Float, Shape{n}).input("y", DataType::Float, Shape{n});
      b.node("Cast", {"dy"}, {"dy_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
      b.node("Cast", {"y"}, {"y_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
      if (fused_op) {
        b.node("ReluGrad", {"dy_t", "y_t"}, {"dx"}, "ai.onyx");
      } else {
        b.node("Cast", {"zero_f"}, {"zero"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
        b.initializer("zero_f", Tensor::scalar<float>(0.0f));
        b.node("Greater", {"y_t", "zero"}, {"mask"});
        b.node("Where", {"mask", "dy_t", "zero"}, {"dx"});
      }
      b.output("dx");
      SessionOptions so;
      so.intra_op_threads = 2;
      so.opt_level = OptLevel::None;  // the reference stays two nodes
      return b.session(so);
    };
    const NamedTensors feeds{{"dy", dy}, {"y", y}};
    expect_same_bits(session(true).run(feeds).at("dx"), session(false).run(feeds).at("dx"),
                     dtype_name(dt));
  }
}

TEST(ReluGradFusion, KernelRefusesMismatchedInputs) {
  ModelBuilder b(17, "ai.onyx");
  b.input("dy", DataType::Float, SymShape{Dim::symbol("a"), Dim::symbol("b")});
  b.input("y", DataType::Float, SymShape{Dim::symbol("c"), Dim::symbol("d")});
  b.node("ReluGrad", {"dy", "y"}, {"dx"}, "ai.onyx");
  b.output("dx");
  Session s = b.session();
  try {
    s.run({{"dy", Tensor::zeros(DataType::Float, {2, 3})},
           {"y", Tensor::zeros(DataType::Float, {3, 2})}});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one shape and dtype"), std::string::npos) << e.what();
  }
  // The session still runs matching inputs.
  const NamedTensors out = s.run({{"dy", Tensor::zeros(DataType::Float, {2, 3})},
                                  {"y", Tensor::zeros(DataType::Float, {2, 3})}});
  EXPECT_EQ(out.at("dx").shape(), (Shape{2, 3}));
}

}  // namespace onyx::test
