// Finite-difference checks of the attention gradient rules (float64): Attention (opset 23-25:
// 3-D and 4-D inputs, grouped KV heads, scale, softcap, boolean and additive masks, causal and
// windowed masks, past KV caches as constants and as parameters, present outputs in the loss,
// nonpad_kv_seqlen) and RotaryEmbedding (in float64, which onyx runs beyond ONNX's float32-only
// constraint, and in float32 through Casts).
#include <algorithm>
#include <cmath>

#include "grad_check.h"

namespace onyx::test {

namespace {

using test::attr_float;
using test::attr_int;
using test::attr_ints;

/// Boolean constant of the given shape from 0/1 values.
GradInput bools(std::string n, Shape s, std::vector<double> v) {
  return C(std::move(n), std::move(s), std::move(v), DataType::Bool);
}

/// Q, K, V as parameters in the 4-D layout: Q [B, Hq, Sq, D], K/V [B, Hk, Skv, D / Dv].
std::vector<GradInput> qkv4(int64_t b, int64_t hq, int64_t hk, int64_t sq, int64_t skv,
                            int64_t d = 4, int64_t dv = 3) {
  return {P("q", {b, hq, sq, d}), P("k", {b, hk, skv, d}), P("v", {b, hk, skv, dv})};
}

GradCase attention(std::vector<GradInput> ins, std::vector<Attribute> attrs = {},
                   int64_t opset = 23) {
  return {.op = "Attention", .inputs = std::move(ins), .attrs = std::move(attrs), .opset = opset};
}

}  // namespace

TEST(GradAttention, FourDimensional) {
  check_gradient(attention(qkv4(2, 2, 2, 3, 5)));
  check_gradient(attention(qkv4(1, 3, 3, 4, 4, 2, 5), {attr_float("scale", 0.7)}));
}

TEST(GradAttention, ThreeDimensional) {
  // [B, S, H*D]: 2 heads of 4 (Q, K) and 3 (V) channels.
  check_gradient(attention({P("q", {2, 3, 8}), P("k", {2, 5, 8}), P("v", {2, 5, 6})},
                           {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 2)}));
}

TEST(GradAttention, GroupedQueryHeads) {
  check_gradient(attention(qkv4(1, 4, 2, 3, 5)));
  check_gradient(attention(qkv4(2, 6, 2, 2, 3, 2, 2), {attr_int("is_causal", 1)}));
  check_gradient(attention({P("q", {1, 3, 12}), P("k", {1, 4, 6}), P("v", {1, 4, 4})},
                           {attr_int("q_num_heads", 4), attr_int("kv_num_heads", 2),
                            attr_float("scale", 0.5)}));
}

TEST(GradAttention, CausalAndSoftcap) {
  check_gradient(attention(qkv4(1, 2, 2, 4, 4), {attr_int("is_causal", 1)}));
  check_gradient(attention(qkv4(1, 2, 2, 3, 5), {attr_int("is_causal", 1)}));  // Sq < Skv
  // softcap 0.8 with large scores: tanh saturates partly, so its derivative matters.
  GradCase gc =
      attention(qkv4(2, 2, 1, 3, 4), {attr_float("softcap", 0.8), attr_float("scale", 2.0)});
  for (auto& in : gc.inputs) in.lo = -2, in.hi = 2;
  check_gradient(gc);
}

TEST(GradAttention, BooleanMasks) {
  // [Sq, Skv] broadcast over batch and heads; row 2 masks every key (its output is zeros).
  auto ins = qkv4(2, 2, 2, 3, 4);
  ins.push_back(bools("mask", {3, 4}, {1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0}));
  check_gradient(attention(ins));
  // [B, 1, Sq, Skv] with causal on top.
  ins = qkv4(2, 2, 2, 3, 3);
  ins.push_back(
      bools("mask", {2, 1, 3, 3}, {1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0}));
  check_gradient(attention(ins, {attr_int("is_causal", 1)}));
  // A mask shorter than the keys: the keys past it are masked.
  ins = qkv4(1, 2, 2, 2, 5);
  ins.push_back(bools("mask", {2, 3}, {1, 0, 1, 1, 1, 0}));
  check_gradient(attention(ins));
}

TEST(GradAttention, AdditiveMasksGetGradients) {
  // A learned relative-position bias (as T5 passes it): [1, Hq, Sq, Skv], a parameter.
  auto ins = qkv4(2, 2, 2, 3, 4);
  ins.push_back(P("bias", {1, 2, 3, 4}));
  check_gradient(attention(ins));
  // [Sq, Skv] broadcast, shorter than the keys, with GQA and softcap.
  ins = qkv4(1, 4, 2, 3, 5);
  ins.push_back(P("bias", {3, 4}));
  check_gradient(attention(ins, {attr_float("softcap", 1.5)}));
  // [1, Skv] broadcast over the rows too, with causal.
  ins = qkv4(2, 2, 2, 3, 3);
  ins.push_back(P("bias", {1, 3}));
  check_gradient(attention(ins, {attr_int("is_causal", 1)}));
  // A constant additive mask with -inf entries.
  const double ninf = -INFINITY;
  ins = qkv4(1, 2, 2, 2, 3);
  ins.push_back(C("mask", {2, 3}, {0, ninf, -0.5, 0.3, 0, ninf}, DataType::Double));
  check_gradient(attention(ins));
}

TEST(GradAttention, PastKeyValueAsConstants) {
  // The cache is a constant: gradients reach Q and the new K, V only. Causal aligns query i
  // with key P + i.
  for (int causal : {0, 1}) {
    SCOPED_TRACE(causal);
    auto ins = qkv4(2, 2, 2, 2, 2);
    ins.push_back(None());
    ins.push_back(C("past_k", {2, 2, 3, 4}, {}, DataType::Double));  // random values
    ins.push_back(C("past_v", {2, 2, 3, 3}, {}, DataType::Double));
    check_gradient(attention(ins, {attr_int("is_causal", causal)}));
  }
}

TEST(GradAttention, PastKeyValueAndPresentOutputs) {
  // Past caches as parameters, 3-D inputs with grouped heads, and present_key / present_value
  // in the loss too.
  GradCase gc = attention({P("q", {1, 2, 8}), P("k", {1, 2, 4}), P("v", {1, 2, 6}),
                           P("mask", {2, 5}), P("past_k", {1, 1, 3, 4}), P("past_v", {1, 1, 3, 6})},
                          {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 1),
                           attr_int("is_causal", 1)});
  gc.outputs = 3;
  gc.loss_outputs = {0, 1, 2};
  check_gradient(gc);
  // Only present_key in the loss: Q's gradient is zero, K's is the cache's.
  gc.loss_outputs = {1};
  check_gradient(gc);
}

TEST(GradAttention, QkMatmulOutputIsRefused) {
  GradCase gc = attention(qkv4(1, 1, 1, 2, 2));
  gc.inputs.push_back(None());
  gc.outputs = 4;
  gc.loss_outputs = {3};
  try {
    check_gradient(gc);
    ADD_FAILURE() << "no error for a loss on qk_matmul_output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qk_matmul_output"), std::string::npos) << e.what();
  }
}

TEST(GradAttention, NonpadKvSeqlenOpset24) {
  for (int causal : {0, 1}) {
    SCOPED_TRACE(causal);
    auto ins = qkv4(2, 2, 2, 2, 4);
    for (int i = 0; i < 3; ++i) ins.push_back(None());
    ins.push_back(C("nonpad", {2}, {3, 4}));
    check_gradient(attention(ins, {attr_int("is_causal", causal)}, 24));
  }
}

TEST(GradAttention, SlidingWindowsOpset25) {
  check_gradient(attention(qkv4(1, 2, 2, 5, 5),
                           {attr_int("is_causal", 1), attr_int("left_window_size", 2)}, 25));
  check_gradient(
      attention(qkv4(1, 2, 1, 4, 6),
                {attr_int("left_window_size", 1), attr_int("right_window_size", 2)}, 25));
}

// Two layers: the second's Q is the first's Y, whose rank and shape come from Attention's
// shape inference (the rule needs Q's rank).
TEST(GradAttention, StackedLayers) {
  GradCase gc{.op = "Attention",
              .inputs = {P("q", {1, 4, 4}), P("k", {1, 5, 6}), P("v", {1, 5, 4}), P("w", {4, 6})},
              .opset = 23};
  gc.build = [](Graph& g) -> std::vector<Value*> {
    auto a = [&](std::vector<Value*> ins) {
      return add(g, "Attention", ins, {attr_int("q_num_heads", 2), attr_int("kv_num_heads", 2)});
    };
    Value* q = add(g, "MatMul", {g.find_value("q"), g.find_value("w")});  // [1, 4, 6]
    Value* y1 = a({q, g.find_value("k"), g.find_value("v")});            // [1, 4, 4]
    Value* q2 = add(g, "MatMul", {y1, g.find_value("w")});               // [1, 4, 6]
    return {a({q2, g.find_value("k"), g.find_value("v")})};
  };
  check_gradient(gc);
}

// ---------------------------------------------------------------- RotaryEmbedding

namespace {

/// cos/sin caches [rows0, rows1, half] (or [rows0, half] when rows1 is 0), initializers of
/// float64 or float32.
void add_caches(Graph& g, int64_t rows0, int64_t rows1, int64_t half, bool f64) {
  std::vector<double> cs, sn;
  for (int64_t r = 0; r < rows0 * std::max<int64_t>(rows1, 1); ++r)
    for (int64_t i = 0; i < half; ++i) {
      double a = (r % 7 + 1) * std::pow(10.0, -static_cast<double>(i) / half);
      cs.push_back(std::cos(a));
      sn.push_back(std::sin(a));
    }
  Shape s = rows1 ? Shape{rows0, rows1, half} : Shape{rows0, half};
  auto make = [&](const std::vector<double>& v) {
    return f64 ? Tensor::from_vector<double>(s, v)
               : Tensor::from_vector<float>(s, std::vector<float>(v.begin(), v.end()));
  };
  g.add_initializer("cos", make(cs));
  g.add_initializer("sin", make(sn));
}

/// RotaryEmbedding in float64 (onyx's kernel runs double beyond ONNX's constraint, for gradient
/// checks) with the usual tolerances, and as ONNX types it: x (float64) -> Cast(float) ->
/// RotaryEmbedding -> Cast(float64), where the op is linear in x, so central differences are
/// exact but for float32 rounding: a large eps keeps that small.
void check_rotary(Shape xs, int64_t cache_rows0, int64_t cache_rows1, int64_t half,
                  std::vector<Attribute> attrs, std::vector<double> pos = {}) {
  for (bool f64 : {true, false}) {
    SCOPED_TRACE(f64 ? "float64" : "float32");
    GradCase gc{.op = "RotaryEmbedding", .inputs = {P("x", xs)}, .opset = 23};
    if (!pos.empty()) gc.inputs.push_back(C("pos", {xs[0], xs[xs.size() == 3 ? 1 : 2]}, pos));
    if (!f64) gc.eps = 0.05, gc.rtol = 1e-4, gc.atol = 2e-5;
    gc.build = [=](Graph& g) -> std::vector<Value*> {
      add_caches(g, cache_rows0, cache_rows1, half, f64);
      auto to = [](DataType t) { return attr_int("to", static_cast<int64_t>(t)); };
      Value* x = g.find_value("x");
      if (!f64) x = add(g, "Cast", {x}, {to(DataType::Float)});
      std::vector<Value*> ins = {x, g.find_value("cos"), g.find_value("sin")};
      if (!pos.empty()) ins.push_back(g.find_value("pos"));
      Value* y = add(g, "RotaryEmbedding", ins, attrs);
      return {f64 ? y : add(g, "Cast", {y}, {to(DataType::Double)})};
    };
    check_gradient(gc);
  }
}

}  // namespace

TEST(GradAttention, RotaryEmbedding) {
  for (int inter : {0, 1}) {
    SCOPED_TRACE(inter);
    // 4-D [B, H, S, D] with per-batch caches [B, S, D/2].
    check_rotary({2, 2, 3, 6}, 2, 3, 3, {attr_int("interleaved", inter)});
    // 3-D [B, S, H*D] with position_ids into a [positions, D/2] cache.
    check_rotary({2, 3, 8}, 6, 0, 2, {attr_int("interleaved", inter), attr_int("num_heads", 2)},
                 {0, 2, 5, 1, 1, 4});
    // Partial rotation: the last 4 of 8 channels pass through.
    check_rotary({1, 2, 3, 8}, 5, 0, 2,
                 {attr_int("interleaved", inter), attr_int("rotary_embedding_dim", 4)},
                 {4, 0, 2});
  }
}

}  // namespace onyx::test

namespace onyx::test {

// The rules emit float32 nodes for float32 models (constants, casts, the -inf fill).
TEST(GradAttention, Float32) {
  auto ins = qkv4(1, 4, 2, 3, 5);
  ins.push_back(bools("mask", {3, 5}, {1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 1}));
  ins.push_back(P("past_k", {1, 2, 2, 4}));
  ins.push_back(P("past_v", {1, 2, 2, 3}));
  // Skv = 2 past + 5 new; the mask covers the first 5.
  check_gradient(
      in_float32(attention(ins, {attr_int("is_causal", 1), attr_float("softcap", 2.0)})));
  ins = qkv4(2, 2, 2, 3, 4);
  ins.push_back(P("bias", {3, 4}));
  check_gradient(in_float32(attention(ins)));
}

}  // namespace onyx::test
