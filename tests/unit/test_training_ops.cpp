// ai.onnx.preview.training Adagrad, Momentum and Adam run through a Session, against float64
// references written here from the ONNX spec's pseudo code.
#include <cmath>
#include <random>

#include "test_util.h"

namespace onyx::test {
namespace {

const char* kDomain = "ai.onnx.preview.training";

/// Runs one training op with inputs R, T, then `tensors` (fed at run time), outputs y0..
NamedTensors run_training_op(const std::string& op, double r, int64_t t, const Named& tensors,
                             std::vector<Attribute> attrs, int outputs,
                             DataType r_type = DataType::Float) {
  ModelBuilder b(21, kDomain);
  NamedTensors feeds;
  feeds["R"] = r_type == DataType::Double ? Tensor::scalar<double>(r)
                                          : Tensor::scalar<float>(static_cast<float>(r));
  feeds["T"] = Tensor::scalar<int64_t>(t);
  std::vector<std::string> ins{"R", "T"}, outs;
  for (const auto& [name, tensor] : tensors) {
    ins.push_back(name);
    feeds[name] = tensor;
  }
  for (const auto& [name, tensor] : feeds) b.input(name, tensor.dtype(), tensor.shape());
  for (int i = 0; i < outputs; ++i) outs.push_back(fmt::format("y{}", i));
  set_attrs(b.node(op, ins, outs, kDomain), std::move(attrs));
  for (const auto& o : outs) b.output(o);
  return b.session().run(feeds);
}

std::vector<double> random_values(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

TEST(TrainingOps, AdagradTwoTensorsDouble) {
  const double r = 0.1, decay = 0.5, eps = 1e-6, l2 = 0.01;
  const int64_t t = 3;
  const auto x1 = random_values(5, 1, -1, 1), g1 = random_values(5, 2, -1, 1),
             h1 = random_values(5, 3, 0, 1);
  const auto x2 = random_values(6, 4, -1, 1), g2 = random_values(6, 5, -1, 1),
             h2 = random_values(6, 6, 0, 1);
  auto out =
      run_training_op("Adagrad", r, t,
                      {{"X1", T_<double>({5}, x1)},
                       {"X2", T_<double>({2, 3}, x2)},
                       {"G1", T_<double>({5}, g1)},
                       {"G2", T_<double>({2, 3}, g2)},
                       {"H1", T_<double>({5}, h1)},
                       {"H2", T_<double>({2, 3}, h2)}},
                      {attr_float("decay_factor", float(decay)), attr_float("epsilon", 1e-6f),
                       attr_float("norm_coefficient", float(l2))},
                      4, DataType::Double);
  auto reference = [&](const std::vector<double>& x, const std::vector<double>& g,
                       const std::vector<double>& h, std::vector<double>& xn,
                       std::vector<double>& hn) {
    const double rate = r / (1 + t * double(float(decay)));
    for (size_t i = 0; i < x.size(); ++i) {
      const double gr = double(float(l2)) * x[i] + g[i];
      hn.push_back(h[i] + gr * gr);
      xn.push_back(x[i] - rate * gr / (std::sqrt(hn.back()) + double(float(eps))));
    }
  };
  std::vector<double> x1n, h1n, x2n, h2n;
  reference(x1, g1, h1, x1n, h1n);
  reference(x2, g2, h2, x2n, h2n);
  EXPECT_EQ(out["y1"].shape(), (Shape{2, 3}));
  EXPECT_EQ(out["y0"].dtype(), DataType::Double);
  expect_near(out["y0"], x1n, 1e-12);
  expect_near(out["y1"], x2n, 1e-12);
  expect_near(out["y2"], h1n, 1e-12);
  expect_near(out["y3"], h2n, 1e-12);
}

TEST(TrainingOps, MomentumStandardAndNesterovFloat) {
  const double r = 0.05, alpha = 0.9, beta = 0.5, l2 = 0.02;
  const auto x = random_values(7, 10, -1, 1), g = random_values(7, 11, -1, 1),
             v = random_values(7, 12, -1, 1);
  for (const char* mode : {"standard", "nesterov"})
    for (int64_t t : {0, 4}) {
      auto out = run_training_op(
          "Momentum", r, t, {{"X", T_({7}, x)}, {"G", T_({7}, g)}, {"V", T_({7}, v)}},
          {attr_float("alpha", float(alpha)), attr_float("beta", float(beta)),
           attr_float("norm_coefficient", float(l2)), attr_string("mode", mode)},
          2);
      // Inputs are float32: compute the reference from the rounded values.
      std::vector<double> xn, vn;
      const double a = float(alpha), bt = t > 0 ? double(float(beta)) : 1.0, rr = float(r);
      for (size_t i = 0; i < x.size(); ++i) {
        const double xi = float(x[i]), gi = float(g[i]), vi = float(v[i]);
        const double gr = double(float(l2)) * xi + gi;
        vn.push_back(a * vi + bt * gr);
        xn.push_back(std::string(mode) == "standard" ? xi - rr * vn.back()
                                                     : xi - rr * (gr + a * vn.back()));
      }
      SCOPED_TRACE(fmt::format("mode {} T {}", mode, t));
      expect_near(out["y0"], xn, 1e-6);
      expect_near(out["y1"], vn, 1e-6);
    }
}

TEST(TrainingOps, AdamWithBiasCorrectionAndPostDecay) {
  const double r = 0.01, alpha = 0.85, beta = 0.99, eps = 1e-5, l2 = 0.001, post = 0.05;
  const auto x = random_values(9, 20, -1, 1), g = random_values(9, 21, -1, 1),
             v = random_values(9, 22, -0.1, 0.1), h = random_values(9, 23, 0, 0.1);
  for (int64_t t : {0, 2}) {
    auto out = run_training_op(
        "Adam", r, t,
        {{"X", T_<double>({3, 3}, x)},
         {"G", T_<double>({3, 3}, g)},
         {"V", T_<double>({3, 3}, v)},
         {"H", T_<double>({3, 3}, h)}},
        {attr_float("alpha", float(alpha)), attr_float("beta", float(beta)),
         attr_float("epsilon", float(eps)), attr_float("norm_coefficient", float(l2)),
         attr_float("norm_coefficient_post", float(post))},
        3, DataType::Double);
    const double a = float(alpha), b = float(beta), e = float(eps), nc = float(l2),
                 np = float(post);
    const double ra = t > 0 ? r * std::sqrt(1 - std::pow(b, t)) / (1 - std::pow(a, t)) : r;
    std::vector<double> xn, vn, hn;
    for (size_t i = 0; i < x.size(); ++i) {
      const double gr = nc * x[i] + g[i];
      vn.push_back(a * v[i] + (1 - a) * gr);
      hn.push_back(b * h[i] + (1 - b) * gr * gr);
      xn.push_back((1 - np) * (x[i] - ra * vn.back() / (std::sqrt(hn.back()) + e)));
    }
    SCOPED_TRACE(fmt::format("T {}", t));
    expect_near(out["y0"], xn, 1e-12);
    expect_near(out["y1"], vn, 1e-12);
    expect_near(out["y2"], hn, 1e-12);
  }
}

TEST(TrainingOps, BadInputsThrow) {
  const Tensor x = T_({3}, {1, 2, 3});
  const std::vector<Attribute> momentum_attrs{attr_float("alpha", 0.9f), attr_float("beta", 1.f),
                                              attr_float("norm_coefficient", 0.f),
                                              attr_string("mode", "standard")};
  // Four tensors cannot form (X, G, V) groups.
  EXPECT_THROW(run_training_op("Momentum", 0.1, 0, {{"X", x}, {"G", x}, {"V", x}, {"W", x}},
                               momentum_attrs, 2),
               Error);
  // V's shape differs from X's.
  EXPECT_THROW(run_training_op("Momentum", 0.1, 0, {{"X", x}, {"G", x}, {"V", T_({2}, {0, 0})}},
                               momentum_attrs, 2),
               Error);
  // mode is required and must be standard or nesterov.
  EXPECT_THROW(run_training_op("Momentum", 0.1, 0, {{"X", x}, {"G", x}, {"V", x}},
                               {attr_float("alpha", 0.9f), attr_float("beta", 1.f),
                                attr_float("norm_coefficient", 0.f), attr_string("mode", "heavy")},
                               2),
               Error);
  // Adam needs (X, G, V, H) and three outputs per tensor.
  try {
    run_training_op("Adam", 0.1, 0, {{"X", x}, {"G", x}, {"V", x}, {"H", x}}, {}, 2);
    ADD_FAILURE() << "no onyx::Error for a missing output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 outputs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onyx::test
