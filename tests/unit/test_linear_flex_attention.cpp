// LinearAttention and FlexAttention against straightforward float64 references written from
// the ONNX formulas, plus bad inputs.
#include <cmath>

#include "test_util.h"

using namespace onyx;
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;
using onyx::test::Named;
using onyx::test::run_op;
using onyx::test::T_;

namespace {

/// Deterministic, varied values in [-1, 1].
std::vector<double> wave(size_t n, double phase) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + phase);
  return v;
}

/// LinearAttention in float64 from the spec's recurrence; inputs packed [B, T, H*D],
/// per-head decay and beta ([B, T, H_kv]), state [B, H_kv, dk, dv].
struct LinearRef {
  int64_t B, T, Hq, Hkv, dk, dv;
  std::string rule;
  std::vector<double> out, state;

  void run(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
           std::vector<double> S, const std::vector<double>& g, const std::vector<double>& beta) {
    bool gated = rule == "gated" || rule == "gated_delta";
    bool delta = rule == "delta" || rule == "gated_delta";
    double scale = 1.0 / std::sqrt(static_cast<double>(dk));
    out.assign(static_cast<size_t>(B * T * Hq * dv), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
          double* s = &S[static_cast<size_t>((b * Hkv + h) * dk * dv)];
          auto at = [&](int64_t d, int64_t m) -> double& { return s[d * dv + m]; };
          const double* kt = &k[static_cast<size_t>(((b * T + t) * Hkv + h) * dk)];
          const double* vt = &v[static_cast<size_t>(((b * T + t) * Hkv + h) * dv)];
          double decay = gated ? std::exp(g[static_cast<size_t>((b * T + t) * Hkv + h)]) : 1.0;
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) at(d, m) *= decay;
          std::vector<double> u(vt, vt + dv);
          if (delta) {
            double bt = beta[static_cast<size_t>((b * T + t) * Hkv + h)];
            for (int64_t m = 0; m < dv; ++m) {
              double r = 0;
              for (int64_t d = 0; d < dk; ++d) r += at(d, m) * kt[d];
              u[m] = bt * (u[m] - r);
            }
          }
          for (int64_t d = 0; d < dk; ++d)
            for (int64_t m = 0; m < dv; ++m) at(d, m) += kt[d] * u[m];
          for (int64_t hq = h * (Hq / Hkv); hq < (h + 1) * (Hq / Hkv); ++hq) {
            const double* qt = &q[static_cast<size_t>(((b * T + t) * Hq + hq) * dk)];
            for (int64_t m = 0; m < dv; ++m) {
              double o = 0;
              for (int64_t d = 0; d < dk; ++d) o += qt[d] * at(d, m);
              out[static_cast<size_t>(((b * T + t) * Hq + hq) * dv + m)] = scale * o;
            }
          }
        }
    state = S;
  }
};

TEST(LinearAttention, GatedDeltaWithGroupedHeadsAndPastState) {
  LinearRef ref{2, 3, 2, 1, 2, 3, "gated_delta", {}, {}};
  auto q = wave(2 * 3 * 2 * 2, 0.1), k = wave(2 * 3 * 1 * 2, 0.5), v = wave(2 * 3 * 3, 0.9);
  auto past = wave(2 * 1 * 2 * 3, 1.3), g = wave(2 * 3, 1.7), beta = wave(2 * 3, 2.1);
  for (double& x : g) x = -std::abs(x);
  for (double& x : beta) x = std::abs(x);
  ref.run(q, k, v, past, g, beta);
  auto y = run_op("LinearAttention",
                  {{"q", T_({2, 3, 4}, q)},
                   {"k", T_({2, 3, 2}, k)},
                   {"v", T_({2, 3, 3}, v)},
                   {"past", T_({2, 1, 2, 3}, past)},
                   {"g", T_({2, 3, 1}, g)},
                   {"beta", T_({2, 3, 1}, beta)}},
                  {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 1)}, 2, 27);
  EXPECT_EQ(y.at("y0").shape(), (Shape{2, 3, 6}));
  expect_near(y.at("y0"), ref.out, 1e-5);
  expect_near(y.at("y1"), ref.state, 1e-5);
}

TEST(LinearAttention, LinearRuleWithoutPastState) {
  LinearRef ref{1, 4, 2, 2, 3, 2, "linear", {}, {}};
  auto q = wave(4 * 6, 0.2), k = wave(4 * 6, 0.4), v = wave(4 * 4, 0.6);
  ref.run(q, k, v, std::vector<double>(2 * 3 * 2, 0.0), {}, {});
  auto y = run_op("LinearAttention",
                  {{"q", T_({1, 4, 6}, q)}, {"k", T_({1, 4, 6}, k)}, {"v", T_({1, 4, 4}, v)}},
                  {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 2),
                   attr_string("update_rule", "linear")},
                  2, 27);
  expect_near(y.at("y0"), ref.out, 1e-5);
  expect_near(y.at("y1"), ref.state, 1e-5);
}

// Found by the model fuzz target: a scalar decay or beta read the last dim of an empty shape
// (UBSan) before the rank check could name it.
TEST(LinearAttention, ScalarDecayOrBetaIsAnErrorNamingIt) {
  Named in = {{"q", T_({1, 1, 2}, {1, 2})}, {"k", T_({1, 1, 2}, {1, 2})},
              {"v", T_({1, 1, 2}, {1, 2})}, {"past", Tensor()},
              {"g", T_({}, {-0.5})},        {"beta", T_({1, 1, 1}, {0.5})}};
  const std::vector<Attribute> attrs{attr_int("q_num_heads", 1), attr_int("kv_num_heads", 1)};
  onyx::test::expect_error([&] { run_op("LinearAttention", in, attrs, 2, 27); },
                           "decay should be [1, 1, 1 or 2] but is []");
  in[4].second = T_({1, 1, 1}, {-0.5});
  in[5].second = T_({}, {0.5});
  onyx::test::expect_error([&] { run_op("LinearAttention", in, attrs, 2, 27); },
                           "beta should be [1, 1, 1 or 1] but is []");
}

TEST(LinearAttention, MissingDecayIsAnError) {
  Named in = {
      {"q", T_({1, 1, 2}, {1, 2})}, {"k", T_({1, 1, 2}, {1, 2})}, {"v", T_({1, 1, 2}, {1, 2})}};
  EXPECT_THROW(run_op("LinearAttention", in,
                      {attr_int("q_num_heads", 1), attr_int("kv_num_heads", 1),
                       attr_string("update_rule", "gated")},
                      2, 27),
               Error);
  EXPECT_THROW(run_op("LinearAttention", in,
                      {attr_int("q_num_heads", 3), attr_int("kv_num_heads", 2),
                       attr_string("update_rule", "linear")},
                      2, 27),
               Error);
}

/// FlexAttention in float64: softmax(score_mult * scale * Q K^T) V with GQA head sharing.
std::vector<double> flex_ref(const std::vector<double>& q, const std::vector<double>& k,
                             const std::vector<double>& v, int64_t B, int64_t Hq, int64_t Hkv,
                             int64_t L, int64_t S, int64_t E, int64_t Ev, double scale,
                             double score_mult) {
  std::vector<double> y(static_cast<size_t>(B * Hq * L * Ev));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t kh = b * Hkv + h / (Hq / Hkv);
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> p(static_cast<size_t>(S));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double s = 0;
          for (int64_t d = 0; d < E; ++d)
            s += q[static_cast<size_t>(((b * Hq + h) * L + i) * E + d)] *
                 k[static_cast<size_t>((kh * S + j) * E + d)];
          p[j] = score_mult * scale * s;
          mx = std::max(mx, p[j]);
        }
        for (double& x : p) sum += x = std::exp(x - mx);
        for (int64_t d = 0; d < Ev; ++d) {
          double o = 0;
          for (int64_t j = 0; j < S; ++j)
            o += p[j] / sum * v[static_cast<size_t>((kh * S + j) * Ev + d)];
          y[static_cast<size_t>(((b * Hq + h) * L + i) * Ev + d)] = o;
        }
      }
    }
  return y;
}

TEST(FlexAttention, GroupedHeadsWithExplicitScale) {
  auto q = wave(1 * 4 * 3 * 2, 0.3), k = wave(1 * 2 * 5 * 2, 0.8), v = wave(1 * 2 * 5 * 3, 1.1);
  ModelBuilder b(26, "ai.onnx.preview");
  b.input("q", DataType::Double, Shape{1, 4, 3, 2});
  b.input("k", DataType::Double, Shape{1, 2, 5, 2});
  b.input("v", DataType::Double, Shape{1, 2, 5, 3});
  onyx::test::set_attrs(b.node("FlexAttention", {"q", "k", "v"}, {"y"}, "ai.onnx.preview"),
                        {attr_float("scale", 0.25f)});
  b.output("y");
  auto y = b.session().run({{"q", T_<double>({1, 4, 3, 2}, q)},
                            {"k", T_<double>({1, 2, 5, 2}, k)},
                            {"v", T_<double>({1, 2, 5, 3}, v)}});
  expect_near(y.at("y"), flex_ref(q, k, v, 1, 4, 2, 3, 5, 2, 3, 0.25, 1.0), 1e-12);
}

TEST(FlexAttention, ScoreModSubgraphRunsBeforeSoftmax) {
  auto q = wave(2 * 1 * 2 * 4, 0.3), k = wave(2 * 1 * 3 * 4, 0.8), v = wave(2 * 1 * 3 * 2, 1.1);
  ModelBuilder b(26, "ai.onnx.preview");
  b.input("q", DataType::Float, Shape{2, 1, 2, 4});
  b.input("k", DataType::Float, Shape{2, 1, 3, 4});
  b.input("v", DataType::Float, Shape{2, 1, 3, 2});
  Node& n = b.node("FlexAttention", {"q", "k", "v"}, {"y"}, "ai.onnx.preview");
  auto mod = std::make_shared<Graph>("double_scores");
  Value* in = mod->get_or_add_value("scores");
  Value* out = mod->get_or_add_value("scores_out");
  mod->inputs = {in};
  mod->add_node("Mul", {in, mod->add_initializer("two", Tensor::scalar<float>(2.0f))}, {out});
  mod->outputs = {out};
  Attribute a;
  a.name = "score_mod";
  a.type = Attribute::Type::Graph;
  a.g = mod;
  n.attrs["score_mod"] = a;
  b.output("y");
  auto y = b.session().run(
      {{"q", T_({2, 1, 2, 4}, q)}, {"k", T_({2, 1, 3, 4}, k)}, {"v", T_({2, 1, 3, 2}, v)}});
  expect_near(y.at("y"), flex_ref(q, k, v, 2, 1, 1, 2, 3, 4, 2, 0.5, 2.0), 1e-5);
}

TEST(FlexAttention, MismatchedHeadSizeIsAnError) {
  ModelBuilder b(26, "ai.onnx.preview");
  b.input("q", DataType::Float, Shape{1, 1, 2, 4});
  b.input("k", DataType::Float, Shape{1, 1, 3, 3});
  b.input("v", DataType::Float, Shape{1, 1, 3, 2});
  b.node("FlexAttention", {"q", "k", "v"}, {"y"}, "ai.onnx.preview");
  b.output("y");
  EXPECT_THROW(b.session().run({{"q", T_({1, 1, 2, 4}, wave(8, 0))},
                                {"k", T_({1, 1, 3, 3}, wave(9, 0))},
                                {"v", T_({1, 1, 3, 2}, wave(6, 0))}}),
               Error);
}

}  // namespace
