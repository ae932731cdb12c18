// Training through attention as exporters spell it: autodiff differentiates the spelling
// (graph/attention_pattern.h) as one unit (autodiff/attention_spelling.cpp), and the optimizer
// runs that backward as one ai.onyx SoftmaxAttentionGrad (inference/fusions_attention_grad.cpp,
// kernels/cpu/softmax_attention_grad.cpp). Each spelling trains to the gradients of the same
// model differentiated node by node (its probabilities also a graph output, which keeps the
// spelling apart; run unoptimized), with the fused kernel and without it; lookalikes keep their
// nodes. (The node-by-node backward fuses too where its nodes have the kernel's form: the
// fusion checks what each edge computes, not who wrote it.)
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/training_graph.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

constexpr int64_t B = 2, S = 5, H = 2, D = 3, E = H * D;

enum class Spelling {
  Bert,        // Q, K^T from Transposes of [B, S, H, D], scores / sqrt(D), no mask
  Torch,       // Q * c1, K^T * c2 (c1 computed at run time), + causal mask, mask first
  Flat,        // 3-D [B*H, S, D], scores * c (constant first), + mask
  TrainedBias, // + a trained position bias: the bias needs a gradient, so no spelling
  MultiQuery,  // as Torch with one key/value head for all query heads (their batch dims broadcast)
  HfFill,      // as Bert, then Where(masked, fill, scores) and + mask (Hugging Face's GPT-2)
  HfKeep       // as Bert, then Where(kept, scores, fill), the condition [1, 1, S, S]
};

/// Whether key j is hidden from query i in the Where spellings: the causal mask, and every key
/// from query 2, whose probabilities are then uniform over the fill (a finite one) and whose
/// scores' gradient Where's backward zeroes (not P's: the kernel must apply the condition).
bool hidden(int64_t i, int64_t j) { return j > i || i == 2; }

struct Built {
  std::unique_ptr<Model> model;
  std::vector<std::string> params;
};

/// y = Attention(x Wq, x Wk, x Wv) spelled as `sp`, reshaped back to [B, S, E]; with
/// `probs_out` the probabilities are a graph output too. `dynamic`: x has symbolic batch and
/// sequence dims and the head shapes are computed from Shape(x) at run time, as torch writes
/// them (their dims unknown to shape inference).
Built attention_model(Spelling sp, bool probs_out, int64_t softmax_axis = -1, bool dynamic = false) {
  ModelBuilder b(17);
  const bool mq = sp == Spelling::MultiQuery;
  if (dynamic)
    b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::symbol("seq"), Dim::fixed(E)});
  else
    b.input("x", DataType::Float, Shape{B, S, E});
  for (const char* w : {"wq", "wk", "wv"})
    b.initializer(w, randn({E, mq && w[1] != 'q' ? D : E}, w[1], 0.5));
  if (dynamic) {
    b.node("Shape", {"x"}, {"xs"});
    b.initializer("zero", Tensor::from_vector<int64_t>({1}, {0}));
    b.initializer("two", Tensor::from_vector<int64_t>({1}, {2}));
    b.node("Slice", {"xs", "zero", "two"}, {"bs"});
    b.initializer("hd", Tensor::from_vector<int64_t>({2}, {H, D}));
    b.initializer("e", Tensor::from_vector<int64_t>({1}, {E}));
    set_attrs(b.node("Concat", {"bs", "hd"}, {"heads"}), {attr_int("axis", 0)});
    set_attrs(b.node("Concat", {"bs", "e"}, {"merge"}), {attr_int("axis", 0)});
  } else {
    b.initializer("heads", Tensor::from_vector<int64_t>({4}, {B, S, H, D}));
    b.initializer("merge", Tensor::from_vector<int64_t>({3}, {B, S, E}));
  }
  b.initializer("heads1", Tensor::from_vector<int64_t>({4}, {0, 0, 1, D}));
  b.initializer("flat", Tensor::from_vector<int64_t>({3}, {B * H, S, D}));
  std::vector<float> causal(S * S);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) causal[i * S + j] = j > i ? -1e9f : 0.f;
  b.initializer("mask", Tensor::from_vector<float>({S, S}, causal));
  for (const char* w : {"q", "k", "v"}) b.node("MatMul", {"x", std::string("w") + w}, {std::string(w) + "2"});
  auto heads = [&](const std::string& in, const std::string& out, std::vector<int64_t> perm) {
    b.node("Reshape", {in, mq && in != "q2" ? "heads1" : "heads"}, {out + "_r"});
    set_attrs(b.node("Transpose", {out + "_r"}, {out}), {attr_ints("perm", std::move(perm))});
  };
  std::string scores;
  if (sp == Spelling::Flat) {
    b.node("Reshape", {"q2", "flat"}, {"q"});
    b.node("Reshape", {"k2", "flat"}, {"k3"});
    set_attrs(b.node("Transpose", {"k3"}, {"kt"}), {attr_ints("perm", {0, 2, 1})});
    b.node("Reshape", {"v2", "flat"}, {"v"});
    b.initializer("c", Tensor::scalar<float>(1.f / std::sqrt(float(D))));
    b.node("MatMul", {"q", "kt"}, {"s"});
    b.node("Mul", {"c", "s"}, {"ss"});
    b.node("Add", {"ss", "mask"}, {"sm"});
    scores = "sm";
  } else {
    heads("q2", "q", {0, 2, 1, 3});
    heads("v2", "v", {0, 2, 1, 3});
    if (sp == Spelling::Bert || sp == Spelling::HfFill || sp == Spelling::HfKeep) {
      heads("k2", "kt", {0, 2, 3, 1});
      b.initializer("sqrt_d", Tensor::scalar<float>(std::sqrt(float(D))));
      b.node("MatMul", {"q", "kt"}, {"s"});
      b.node("Div", {"s", "sqrt_d"}, {"ss"});
      scores = "ss";
      if (sp != Spelling::Bert) {
        const bool keep = sp == Spelling::HfKeep;
        std::vector<bool> cond(S * S);
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < S; ++j) cond[i * S + j] = hidden(i, j) != keep;
        b.initializer("cond", Tensor::from_vector<bool>(keep ? Shape{1, 1, S, S} : Shape{S, S}, cond));
        b.initializer("fill", Tensor::scalar<float>(-1e4f));
        b.node("Where", keep ? std::vector<std::string>{"cond", "ss", "fill"}
                             : std::vector<std::string>{"cond", "fill", "ss"},
               {"sw"});
        scores = "sw";
        if (!keep) {
          b.node("Add", {"sw", "mask"}, {"swm"});
          scores = "swm";
        }
      }
    } else {
      heads("k2", "k", {0, 2, 1, 3});
      set_attrs(b.node("Transpose", {"k"}, {"kt"}), {attr_ints("perm", {0, 1, 3, 2})});
      // torch's sqrt(scale) on each side, the first computed at run time.
      b.initializer("scale", Tensor::scalar<float>(1.f / std::sqrt(float(D))));
      b.node("Sqrt", {"scale"}, {"c1"});
      b.initializer("c2", Tensor::from_vector<float>({1}, {std::sqrt(1.f / std::sqrt(float(D)))}));
      b.node("Mul", {"q", "c1"}, {"qs"});
      b.node("Mul", {"c2", "kt"}, {"ks"});
      b.node("MatMul", {"qs", "ks"}, {"s"});
      if (sp == Spelling::TrainedBias) {
        b.initializer("bias", randn({H, S, S}, 11, 0.3));
        b.node("Add", {"s", "bias"}, {"sm"});
      } else {
        b.node("Add", {"mask", "s"}, {"sm"});
      }
      scores = "sm";
    }
  }
  set_attrs(b.node("Softmax", {scores}, {"p"}), {attr_int("axis", softmax_axis)});
  b.node("MatMul", {"p", "v"}, {"o"});
  if (sp == Spelling::Flat) {
    b.node("Reshape", {"o", "merge"}, {"y"});
  } else {
    set_attrs(b.node("Transpose", {"o"}, {"ot"}), {attr_ints("perm", {0, 2, 1, 3})});
    b.node("Reshape", {"ot", "merge"}, {"y"});
  }
  b.output("y");
  if (probs_out) b.output("p");
  Built out{b.build(), {"wq", "wk", "wv"}};
  if (sp == Spelling::TrainedBias) out.params.push_back("bias");
  infer_types_and_shapes(*out.model);
  return out;
}

const NamedTensors& feeds() {
  static const NamedTensors f{{"x", randn({B, S, E}, 7, 1.0)}, {"labels", randn({B, S, E}, 8, 1.0)}};
  return f;
}

/// Each gradient of `a` within `tol` (relative to the tensor's largest magnitude) of `b`'s.
void expect_close(const Tensor& a, const Tensor& b, const std::string& what, double tol = 2e-5) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  double scale = 1e-30;
  for (double v : y) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * scale) << what << " at " << i;
}

}  // namespace

TEST(AttentionGradFusion, SpellingsTrainAsTheirNodesDo) {
  const autodiff::LossSpec spec{.kind = "mse"};
  const std::pair<Spelling, bool> cases[] = {{Spelling::Bert, false},       {Spelling::Torch, false},
                                              {Spelling::Flat, false},       {Spelling::MultiQuery, false},
                                              {Spelling::Torch, true},       {Spelling::MultiQuery, true},
                                              {Spelling::HfFill, false},     {Spelling::HfKeep, false}};
  for (const auto& [sp, dynamic] : cases) {
    const std::string what =
        "spelling " + std::to_string(static_cast<int>(sp)) + (dynamic ? " (dynamic shapes)" : "");
    Built fused_m = attention_model(sp, false, -1, dynamic), plain_m = attention_model(sp, true, -1, dynamic);
    const auto fused = autodiff::build_training_graph(*fused_m.model, spec, fused_m.params);
    const auto plain = autodiff::build_training_graph(*plain_m.model, spec, plain_m.params);
    // The reference runs every node as autodiff wrote it, none fused.
    const NamedTensors want = session_of(*plain.model, OptLevel::None, 1).run(feeds());
    for (OptLevel level : {OptLevel::None, OptLevel::All})
      for (int threads : {1, 2}) {
        const Session s = session_of(*fused.model, level, threads);
        EXPECT_EQ(op_counts(s)["ai.onyx:SoftmaxAttentionGrad"], level == OptLevel::All ? 1 : 0) << what;
        // The 4-D spellings' head Transposes around the backward are read and written in place;
        // not where a gradient is first reduced to its input's shape (the multi-query keys' and
        // values' over heads).
        for (const auto& n : s.model().graph->nodes()) {
          if (n->op_type != "SoftmaxAttentionGrad" || sp == Spelling::Flat) continue;
          for (const char* perm : {"dO_perm", "dQ_perm"}) EXPECT_TRUE(n->has_attr(perm)) << what << " " << perm;
          for (const char* perm : {"dKt_perm", "dV_perm"})
            EXPECT_EQ(n->has_attr(perm), sp != Spelling::MultiQuery) << what << " " << perm;
        }
        for (const auto& n : s.model().graph->nodes()) {
          if (n->op_type != "SoftmaxAttentionGrad") continue;
          EXPECT_EQ(n->attr_int("keep_where_true", -1),
                    sp == Spelling::HfFill ? 0 : sp == Spelling::HfKeep ? 1 : -1) << what;
        }
        const NamedTensors got = s.run(feeds());
        expect_close(got.at(fused.loss), want.at(plain.loss), what + " loss");
        for (size_t i = 0; i < fused.grads.size(); ++i)
          expect_close(got.at(fused.grads[i]), want.at(plain.grads[i]), what + " d" + fused_m.params[i]);
      }
  }
}

TEST(AttentionGradFusion, GradientsOfSomeInputsOnly) {
  // One trained projection: the fused node writes only that input's gradient (dQ alone, dKt
  // alone), or no node runs Softmax's gradient at all (dV alone).
  const autodiff::LossSpec spec{.kind = "mse"};
  for (const char* w : {"wq", "wk", "wv"}) {
    Built fused_m = attention_model(Spelling::Torch, false), plain_m = attention_model(Spelling::Torch, true);
    const auto fused = autodiff::build_training_graph(*fused_m.model, spec, {w});
    const auto plain = autodiff::build_training_graph(*plain_m.model, spec, {w});
    const Session s = session_of(*fused.model, OptLevel::All, 2);
    EXPECT_EQ(op_counts(s)["ai.onyx:SoftmaxAttentionGrad"], std::string(w) == "wv" ? 0 : 1) << w;
    const NamedTensors got = s.run(feeds());
    const NamedTensors want = session_of(*plain.model, OptLevel::None, 1).run(feeds());
    expect_close(got.at(fused.grads[0]), want.at(plain.grads[0]), std::string("d") + w);
  }
}

TEST(AttentionGradFusion, LookalikesKeepTheirNodes) {
  const autodiff::LossSpec spec{.kind = "mse"};
  // A trained bias on the scores needs Softmax's gradient as a value: node by node, and its
  // gradient still right (against the same model with the probabilities exported).
  {
    Built m = attention_model(Spelling::TrainedBias, false), ref = attention_model(Spelling::TrainedBias, true);
    const auto tg = autodiff::build_training_graph(*m.model, spec, m.params);
    const auto tr = autodiff::build_training_graph(*ref.model, spec, ref.params);
    const Session s = session_of(*tg.model, OptLevel::All, 2);
    EXPECT_EQ(op_counts(s)["ai.onyx:SoftmaxAttentionGrad"], 0);
    const NamedTensors got = s.run(feeds()), want = session_of(*tr.model, OptLevel::None, 1).run(feeds());
    for (size_t i = 0; i < tg.grads.size(); ++i)
      expect_close(got.at(tg.grads[i]), want.at(tr.grads[i]), "d" + m.params[i]);
  }
  // Softmax over another axis is not attention.
  {
    Built m = attention_model(Spelling::Bert, false, /*softmax_axis=*/2);
    const auto tg = autodiff::build_training_graph(*m.model, spec, m.params);
    EXPECT_EQ(op_counts(session_of(*tg.model, OptLevel::All, 2))["ai.onyx:SoftmaxAttentionGrad"], 0);
  }
}

TEST(AttentionGradFusion, BadOperandsAreErrorsAndTheSessionStaysUsable) {
  ModelBuilder b(17, "ai.onyx");
  b.input("do", DataType::Float, Shape{2, 4, 3});
  const Dim two = Dim::fixed(2), keys = Dim::symbol("keys");
  b.input("p", DataType::Float, SymShape{two, Dim::symbol("s"), keys});
  b.input("v", DataType::Float, SymShape{two, keys, Dim::fixed(3)});
  b.input("q", DataType::Float, Shape{2, 4, 5});
  b.input("kt", DataType::Float, SymShape{two, Dim::fixed(5), keys});
  b.node("SoftmaxAttentionGrad", {"do", "p", "v", "q", "kt"}, {"dq", "dk", "dv"}, "ai.onyx");
  for (const char* o : {"dq", "dk", "dv"}) b.output(o);
  const Session s = b.session();
  NamedTensors f{{"do", randn({2, 4, 3}, 1)}, {"v", randn({2, 4, 3}, 3)}, {"q", randn({2, 4, 5}, 4)},
                 {"kt", randn({2, 5, 4}, 5)}};
  f["p"] = randn({2, 3, 4}, 2);  // 3 query rows against dO's 4
  expect_error([&] { s.run(f); }, "P should be float [2, 4, 4] (batch dims may be 1) but is float [2, 3, 4]");
  f["p"] = randn({2, 4, 4}, 2);
  const NamedTensors out = s.run(f);
  EXPECT_EQ(out.at("dq").shape(), Shape({2, 4, 5}));
  EXPECT_EQ(out.at("dk").shape(), Shape({2, 5, 4}));
  EXPECT_EQ(out.at("dv").shape(), Shape({2, 4, 3}));
  // No keys: empty dKt and dV, and dQ an empty sum (zeros).
  f["p"] = randn({2, 4, 0}, 2);
  f["v"] = randn({2, 0, 3}, 3);
  f["kt"] = randn({2, 5, 0}, 5);
  const NamedTensors none = s.run(f);
  expect_near(none.at("dq"), std::vector<double>(2 * 4 * 5, 0.0), 0.0);
  EXPECT_EQ(none.at("dk").shape(), Shape({2, 5, 0}));
  EXPECT_EQ(none.at("dv").shape(), Shape({2, 0, 3}));
  // A Where's condition must be bool and broadcast to P's shape; the one given zeroes dX where
  // it is false (keep_where_true defaults to 1), here every score of the first batch.
  {
    ModelBuilder mb(17, "ai.onyx");
    mb.input("do", DataType::Float, Shape{2, 4, 3});
    mb.input("p", DataType::Float, Shape{2, 4, 4});
    mb.input("v", DataType::Float, Shape{2, 4, 3});
    mb.input("q", DataType::Float, Shape{2, 4, 5});
    mb.input("kt", DataType::Float, Shape{2, 5, 4});
    mb.input("cond", DataType::Bool, SymShape{Dim::symbol("c0"), Dim::symbol("c1"), Dim::symbol("c2")});
    mb.node("SoftmaxAttentionGrad", {"do", "p", "v", "q", "kt", "", "cond"}, {"dq", "dk", "dv"}, "ai.onyx");
    for (const char* o : {"dq", "dk", "dv"}) mb.output(o);
    const Session masked = mb.session();
    NamedTensors g{{"do", randn({2, 4, 3}, 1)}, {"p", randn({2, 4, 4}, 2)}, {"v", randn({2, 4, 3}, 3)},
                   {"q", randn({2, 4, 5}, 4)}, {"kt", randn({2, 5, 4}, 5)}};
    g["cond"] = Tensor::from_vector<bool>({3, 1, 1}, {true, true, true});
    expect_error([&] { masked.run(g); }, "cond should be bool broadcasting to [2, 4, 4] but is bool [3, 1, 1]");
    g["cond"] = Tensor::from_vector<bool>({2, 1, 1}, {false, true});
    const NamedTensors half = masked.run(g);
    g["cond"] = Tensor::from_vector<bool>({1, 1, 1}, {true});
    const NamedTensors all = masked.run(g);
    const auto dq_half = half.at("dq").to_double_vector(), dq_all = all.at("dq").to_double_vector();
    for (size_t i = 0; i < dq_half.size(); ++i)
      EXPECT_EQ(dq_half[i], i < dq_half.size() / 2 ? 0.0 : dq_all[i]) << i;
    EXPECT_EQ(half.at("dv").to_double_vector(), all.at("dv").to_double_vector());  // dV takes no dX
  }
  // A perm attribute that is no permutation is refused when the session is made.
  ModelBuilder bad(17, "ai.onyx");
  bad.input("do", DataType::Float, Shape{2, 4, 3});
  bad.input("p", DataType::Float, Shape{2, 4, 4});
  bad.input("v", DataType::Float, Shape{2, 4, 3});
  set_attrs(bad.node("SoftmaxAttentionGrad", {"do", "p", "v"}, {"", "", "dv"}, "ai.onyx"),
            {attr_ints("dV_perm", {0, 0, 1})});
  bad.output("dv");
  expect_error([&] { bad.session(); }, "attribute dV_perm should be a permutation of 0..2 but is [0, 0, 1]");
}

}  // namespace onyx::test
