// GELU fusions (inference/fusions_gelu.cpp) and the ai.onyx GeluGrad kernel
// (kernels/cpu/gelu_grad.cpp): exporters' Erf spellings become one com.microsoft Gelu with the
// same outputs; look-alikes are left alone; GeluGrad matches float64 math in every float type.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx::test {
namespace {

Tensor scalar_f32(double v) { return Tensor::scalar<float>(static_cast<float>(v)); }

/// x [2, 3, 8] -> GELU as the exporter `spelling` writes it -> y; the constants come as
/// initializers, or as Constant nodes (`constant_nodes`).
std::unique_ptr<Model> gelu_model(int spelling, bool constant_nodes, double half = 0.5) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 8});
  const std::map<std::string, double> constants = {
      {"sqrt2", std::sqrt(2.0)}, {"inv_sqrt2", 1 / std::sqrt(2.0)}, {"one", 1.0}, {"half", half}};
  for (const auto& [name, v] : constants) {
    if (constant_nodes) {
      Node& c = b.node("Constant", {}, {name});
      Attribute a;
      a.name = "value";
      a.type = Attribute::Type::Tensor;
      a.t = scalar_f32(v);
      c.attrs["value"] = a;
    } else {
      b.initializer(name, scalar_f32(v));
    }
  }
  if (spelling == 2)
    b.node("Mul", {"x", "inv_sqrt2"}, {"s"});
  else
    b.node("Div", {"x", "sqrt2"}, {"s"});
  b.node("Erf", {"s"}, {"e"});
  b.node("Add", {"e", "one"}, {"a"});
  if (spelling == 0) {  // torch.nn.GELU through the TorchScript exporter, Hugging Face's BERT
    b.node("Mul", {"x", "a"}, {"m"});
    b.node("Mul", {"m", "half"}, {"y"});
  } else if (spelling == 1) {
    b.node("Mul", {"half", "x"}, {"m"});
    b.node("Mul", {"a", "m"}, {"y"});
  } else {
    b.node("Mul", {"a", "half"}, {"m"});
    b.node("Mul", {"x", "m"}, {"y"});
  }
  b.output("y");
  return b.build();
}

}  // namespace

TEST(GeluFusion, ExporterSpellingsBecomeOneGelu) {
  const Tensor x = random_normal({2, 3, 8}, 3, 2.5f);
  for (int spelling : {0, 1, 2})
    for (bool constant_nodes : {false, true}) {
      SCOPED_TRACE(testing::Message() << "spelling " << spelling << " constant nodes " << constant_nodes);
      SessionOptions plain;
      plain.opt_level = OptLevel::None;
      Session fused(gelu_model(spelling, constant_nodes)), ref(gelu_model(spelling, constant_nodes), plain);
      auto ops = op_counts(fused);
      EXPECT_EQ(ops["com.microsoft:Gelu"], 1);
      EXPECT_EQ(ops[":Erf"], 0);
      EXPECT_EQ(fused.model().graph->num_nodes(), 1u);
      auto got = fused.run({{"x", x}}).at("y").to_double_vector();
      auto want = ref.run({{"x", x}}).at("y").to_double_vector();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << i;
    }
}

/// x [2, 3, 8] -> the tanh GELU as Hugging Face's GPT-2 (NewGELUActivation) exports it:
/// Mul(0.5, x) * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)))); `cube_as_muls` writes
/// x^3 as Mul(x, Mul(x, x)), `a_constant` perturbs 0.044715 to a look-alike.
std::unique_ptr<Model> tanh_gelu_model(bool cube_as_muls, double a_constant = 0.044715) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 8});
  for (const auto& [name, v] : std::map<std::string, double>{{"three", 3.0},
                                                             {"a", a_constant},
                                                             {"k", std::sqrt(2.0 / M_PI)},
                                                             {"one", 1.0},
                                                             {"half", 0.5}})
    b.initializer(name, scalar_f32(v));
  b.node("Mul", {"half", "x"}, {"hx"});
  if (cube_as_muls) {
    b.node("Mul", {"x", "x"}, {"x2"});
    b.node("Mul", {"x", "x2"}, {"x3"});
  } else {
    b.node("Pow", {"x", "three"}, {"x3"});
  }
  b.node("Mul", {"a", "x3"}, {"ax3"});
  b.node("Add", {"x", "ax3"}, {"inner"});
  b.node("Mul", {"inner", "k"}, {"arg"});
  b.node("Tanh", {"arg"}, {"t"});
  b.node("Add", {"one", "t"}, {"onet"});
  b.node("Mul", {"hx", "onet"}, {"y"});
  b.output("y");
  return b.build();
}

TEST(GeluFusion, TanhSpellingsBecomeOneFastGelu) {
  const Tensor x = random_normal({2, 3, 8}, 5, 2.5f);
  for (bool cube_as_muls : {false, true}) {
    SCOPED_TRACE(cube_as_muls ? "x * (x * x)" : "Pow(x, 3)");
    SessionOptions plain;
    plain.opt_level = OptLevel::None;
    Session fused(tanh_gelu_model(cube_as_muls)), ref(tanh_gelu_model(cube_as_muls), plain);
    auto ops = op_counts(fused);
    EXPECT_EQ(ops["com.microsoft:FastGelu"], 1);
    EXPECT_EQ(fused.model().graph->num_nodes(), 1u);
    auto got = fused.run({{"x", x}}).at("y").to_double_vector();
    auto want = ref.run({{"x", x}}).at("y").to_double_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << i;
  }
  // 0.05 instead of 0.044715 is another function: nothing fuses.
  Session other(tanh_gelu_model(false, 0.05));
  EXPECT_EQ(op_counts(other)["com.microsoft:FastGelu"], 0);
  EXPECT_EQ(op_counts(other)[":Tanh"], 1);
}

TEST(GeluFusion, FastGeluWithBiasMatchesFloat64) {
  for (DataType dt : {DataType::Float, DataType::Double, DataType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    ModelBuilder b(17, "com.microsoft");
    b.input("x", dt, Shape{3, 5});
    b.input("bias", dt, SymShape{Dim::symbol("n")});  // a wrong size reaches the kernel
    b.node("FastGelu", {"x", "bias"}, {"y"}, "com.microsoft");
    b.output("y");
    Session s = b.session();
    const std::vector<double> xv = random_normal({3, 5}, 7, 2.0f).to_double_vector();
    const std::vector<double> bv = {0.5, -1, 0.25, 2, -0.125};
    auto as = [dt](const Shape& shape, const std::vector<double>& v) {
      return dt == DataType::Float    ? T_<float>(shape, v)
             : dt == DataType::Double ? T_<double>(shape, v)
                                      : T_<bfloat16>(shape, v);
    };
    Tensor xt = as({3, 5}, xv), bt = as({5}, bv);
    std::vector<double> want;
    const std::vector<double> xr = xt.to_double_vector(), br = bt.to_double_vector();
    for (size_t i = 0; i < xr.size(); ++i) {
      const double v = xr[i] + br[i % 5];
      want.push_back(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    expect_near(s.run({{"x", xt}, {"bias", bt}}).at("y"), want,
                dt == DataType::BFloat16 ? 3e-2 : 1e-6);
    expect_error([&] { s.run({{"x", xt}, {"bias", as({3}, {1, 2, 3})}}); }, "bias must be");
  }
}

TEST(GeluFusion, LookalikesAreLeftAlone) {
  // Another constant than 0.5.
  EXPECT_EQ(op_counts(Session(gelu_model(0, false, 0.6)))[":Erf"], 1);
  // An intermediate is also a graph output.
  auto m = gelu_model(0, false);
  m->graph->outputs.push_back(m->graph->find_value("e"));
  Session s(std::move(m));
  EXPECT_EQ(op_counts(s)["com.microsoft:Gelu"], 0);
  EXPECT_EQ(op_counts(s)[":Erf"], 1);
}

// ai.onyx GeluGrad(dY, X) = dY * (Phi(X) + X phi(X)), against float64 in every float type.
TEST(GeluFusion, GeluGradKernelMatchesFloat64) {
  const Shape shape{3, 1000};  // not a multiple of any vector or block width
  const Tensor x = random_normal(shape, 7, 3.0f), dy = random_normal(shape, 8);
  const auto xs = x.to_double_vector(), dys = dy.to_double_vector();
  for (bool tanh_form : {false, true})
  for (DataType dt : {DataType::Float, DataType::Double, DataType::BFloat16, DataType::Float16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + (tanh_form ? " tanh" : " erf"));
    ModelBuilder b(17, "ai.onyx");
    b.input("dy", DataType::Float, shape).input("x", DataType::Float, shape);
    b.node("Cast", {"dy"}, {"dy_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    b.node("Cast", {"x"}, {"x_t"}).attrs["to"] = attr_int("to", static_cast<int64_t>(dt));
    Node& gg = b.node("GeluGrad", {"dy_t", "x_t"}, {"dx_t"}, "ai.onyx");
    if (tanh_form) gg.attrs["approximate"] = attr_string("approximate", "tanh");
    b.node("Cast", {"dx_t"}, {"dx"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
    b.node("Cast", {"x_t"}, {"x_back"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
    b.node("Cast", {"dy_t"}, {"dy_back"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
    b.output("dx").output("x_back").output("dy_back");
    auto out = b.session().run({{"dy", dy}, {"x", x}});
    // The reference sees the inputs as rounded to dt.
    auto xr = out.at("x_back").to_double_vector(), dyr = out.at("dy_back").to_double_vector();
    auto got = out.at("dx").to_double_vector();
    const double tol = dt == DataType::BFloat16 ? 1.6e-2 : dt == DataType::Float16 ? 2e-3 : 2e-6;
    const double k = std::sqrt(2 / M_PI), c = 0.044715;
    for (size_t i = 0; i < got.size(); ++i) {
      const double v = xr[i], th = std::tanh(k * (v + c * v * v * v));
      const double d = tanh_form ? 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * c * v * v)
                                 : 0.5 * std::erfc(-v / std::sqrt(2.0)) +
                                       v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
      const double want = dyr[i] * d;
      ASSERT_NEAR(got[i], want, tol * (1 + std::abs(want))) << i << " x " << v;
    }
  }
}

TEST(GeluFusion, GeluGradRefusesAnUnknownApproximation) {
  ModelBuilder b(17, "ai.onyx");
  b.input("dy", DataType::Float, Shape{2, 3}).input("x", DataType::Float, Shape{2, 3});
  b.node("GeluGrad", {"dy", "x"}, {"dx"}, "ai.onyx").attrs["approximate"] = attr_string("approximate", "sigmoid");
  b.output("dx");
  try {
    b.session();
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("approximate must be 'none' or 'tanh', found 'sigmoid'"),
              std::string::npos) << e.what();
  }
}

TEST(GeluFusion, GeluGradRefusesMismatchedInputs) {
  ModelBuilder b(17, "ai.onyx");
  b.input("dy", DataType::Float, Shape{2, 3}).input("x", DataType::Float, Shape{3, 2});
  b.node("GeluGrad", {"dy", "x"}, {"dx"}, "ai.onyx");
  b.output("dx");
  Session s = b.session();
  try {
    s.run({{"dy", Tensor::zeros(DataType::Float, {2, 3})}, {"x", Tensor::zeros(DataType::Float, {3, 2})}});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one shape and dtype"), std::string::npos) << e.what();
  }
}

}  // namespace onyx::test
