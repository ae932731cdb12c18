// Gradient rules: attention (Attention, opset 23-25) and rotary embeddings (RotaryEmbedding).
//
// Attention recomputes its probabilities in backward instead of saving them from forward: the
// kernel never materialises the [B, H, Sq, Skv] matrix (it works one head at a time), so saving
// it would keep the largest activation of every layer alive from forward to backward; the
// recompute costs one Q K^T product and a softmax per layer and holds P for one layer at a time.
// Everything is computed in the 4-D [B, H, S, D] layout, with KV heads repeated for grouped
// queries and the past cache concatenated in front of the new keys and values.
#include <climits>
#include <cmath>
#include <limits>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

using Ints = std::vector<int64_t>;

Attribute perm(Ints p) { return Attribute::of_ints("perm", std::move(p)); }
Attribute axis_attr(int64_t a) { return Attribute::of_int("axis", a); }

/// Dim i of v when it is fixed.
std::optional<int64_t> fixed_dim(const GradContext& c, const Value* v, size_t i) {
  const auto& s = c.sym_shape(v);
  if (!s || s->size() <= i || !(*s)[i].is_fixed()) return std::nullopt;
  return (*s)[i].value;
}

/// Shape(v)[from:to] as a 1-D int64 value.
Value* dims(GradContext& c, Value* v, int64_t from, int64_t to) {
  return c.op("Slice", {c.shape_of(v), c.ints({from}), c.ints({to})});
}

/// Shape(v)[i] as a 0-D int64 value.
Value* dim_scalar(GradContext& c, Value* v, int64_t i) {
  return c.op("Squeeze", {dims(c, v, i, i + 1), c.ints({0})});
}

/// [B, S, H*D] -> [B, H, S, D].
Value* split_heads(GradContext& c, Value* x, int64_t heads) {
  Value* r = c.op("Reshape", {x, c.ints({0, 0, heads, -1})});
  return c.op("Transpose", {r}, {perm({0, 2, 1, 3})});
}

/// [B, H, S, D] -> [B, S, H*D].
Value* merge_heads(GradContext& c, Value* x) {
  Value* t = c.op("Transpose", {x}, {perm({0, 2, 1, 3})});
  return c.op("Reshape", {t, c.ints({0, 0, -1})});
}

Value* swap_last(GradContext& c, Value* x) { return c.op("Transpose", {x}, {perm({0, 1, 3, 2})}); }

/// x[:, :, from:to] over the sequence axis (bounds as 1-D int64 values).
Value* seq_slice(GradContext& c, Value* x, Value* from, Value* to) {
  return c.op("Slice", {x, from, to, c.ints({2})});
}

/// Grouped-query attention: KV head h serves q heads h*rep .. h*rep+rep-1.
struct Groups {
  bool repeat = false;  // false when statically known that every q head has its own KV head
  Value* rep = nullptr;  // 1-D int64 [rep]
  Value* q4 = nullptr;

  /// [B, Hk, S, D] -> [B, Hq, S, D], each KV head repeated rep times.
  Value* expand(GradContext& c, Value* kv) const {
    if (!repeat) return kv;
    Value* u = c.op("Unsqueeze", {kv, c.ints({2})});
    Value* shape = c.op("Concat", {c.ints({1, 1}), rep, c.ints({1, 1})}, {axis_attr(0)});
    Value* e = c.op("Expand", {u, shape});
    Value* target = c.op("Concat", {dims(c, q4, 0, 2), dims(c, kv, 2, 4)}, {axis_attr(0)});
    return c.op("Reshape", {e, target});
  }
  /// The adjoint of expand: [B, Hq, S, D] -> [B, Hk, S, D], summing each group of rep heads.
  Value* reduce(GradContext& c, Value* g, Value* kv) const {
    if (!repeat) return g;
    Value* target = c.op("Concat", {dims(c, kv, 0, 2), rep, dims(c, g, 2, 4)}, {axis_attr(0)});
    Value* r = c.op("Reshape", {g, target});
    return c.op("ReduceSum", {r, c.ints({2})}, {Attribute::of_int("keepdims", 0)});
  }
};

/// The additive bias the kernel puts on the scores before the softmax ([.., Sq, Skv],
/// broadcasting to [B, Hq, Sq, Skv]) and the attn_mask view the mask gradient is taken on.
struct Bias {
  Value* total = nullptr;  // nullptr: no bias
  Value* mask = nullptr;   // the float mask padded to Skv (its gradient is the scores')
  Value* mask_len = nullptr;  // 1-D [lm] when the mask was padded
};

Bias attention_bias(GradContext& c, Value* q4, Value* kf, Value* past_k) {
  const Node& n = c.node();
  Value *mask = c.in(3), *nonpad = c.in(6);
  Value* ninf = c.scalar(-std::numeric_limits<double>::infinity(), c.in(0));
  Value* zero = c.scalar(0.0, c.in(0));
  Bias b;
  if (mask) {
    int r = c.rank(mask);
    ONYX_CHECK(r >= 1, "{}: the rank of attn_mask '{}' must be known to build the gradient",
               c.label(), mask->name);
    bool is_bool = c.dtype(mask) == DataType::Bool;
    Value* m = mask;
    // Keys past the mask's last axis are masked: pad it to Skv unless it provably has Skv keys.
    auto lm = fixed_dim(c, mask, r - 1), skv = fixed_dim(c, kf, 2);
    if (!(lm && skv && *lm == *skv)) {
      b.mask_len = dims(c, mask, r - 1, r);
      Value* extra = c.op("Sub", {dims(c, kf, 2, 3), b.mask_len});
      Value* pads = c.op("Concat", {c.ints(Ints(2 * r - 1, 0)), extra}, {axis_attr(0)});
      Value* fill = is_bool ? c.op("Cast", {c.int_scalar(0)},
                                   {Attribute::of_int("to", static_cast<int64_t>(DataType::Bool))})
                            : c.op("CastLike", {ninf, mask});
      m = c.op("Pad", {m, pads, fill});
    }
    if (is_bool) {
      m = c.op("Where", {m, zero, ninf});
    } else {
      if (c.dtype(mask) != c.dtype(c.in(0))) m = c.cast_like(m, c.in(0));
      b.mask = m;
    }
    b.total = m;
  }
  bool causal = n.attr_int("is_causal", 0) != 0;
  int64_t left = c.opset() >= 25 ? n.attr_int("left_window_size", -1) : -1;
  int64_t right = c.opset() >= 25 ? n.attr_int("right_window_size", -1) : -1;
  if (!causal && left < 0 && right < 0 && !nonpad) return b;
  // diff[i, j] = i + offset - j, offset = the past length (or nonpad - Sq per batch without a
  // past); key j is allowed when diff >= 0 (causal) and inside the windows and nonpad.
  Value* one = c.int_scalar(1);
  Value* i = c.op("Range", {c.int_scalar(0), dim_scalar(c, q4, 2), one});
  i = c.op("Unsqueeze", {i, c.ints({1})});
  Value* j = c.op("Range", {c.int_scalar(0), dim_scalar(c, kf, 2), one});
  Value* offset = nullptr;
  Value* valid = nullptr;  // [B, 1, 1, 1] number of valid keys
  if (nonpad) valid = c.op("Reshape", {nonpad, c.ints({-1, 1, 1, 1})});
  if (past_k)
    offset = dims(c, past_k, 2, 3);
  else if (nonpad)
    offset = c.op("Sub", {valid, dims(c, q4, 2, 3)});
  Value* diff = c.op("Sub", {offset ? c.op("Add", {i, offset}) : i, j});
  Value* allowed = nullptr;
  auto both = [&](Value* cond) { allowed = allowed ? c.op("And", {allowed, cond}) : cond; };
  if (causal) both(c.op("GreaterOrEqual", {diff, c.int_scalar(0)}));
  if (left >= 0) both(c.op("LessOrEqual", {diff, c.int_scalar(left)}));
  if (right >= 0) both(c.op("GreaterOrEqual", {diff, c.int_scalar(-right)}));
  if (nonpad) both(c.op("Less", {j, valid}));
  Value* cb = c.op("Where", {allowed, zero, ninf});
  b.total = b.total ? c.op("Add", {b.total, cb}) : cb;
  return b;
}

/// The forward pass recomputed in the 4-D layout: probabilities P and what backward reads.
struct Recomputed {
  bool three = false;
  int64_t hq = 0;
  Value *q4, *kf, *vf, *kr, *vr;  // kf/vf: past ++ new; kr/vr: repeated over q heads
  Groups grp;
  Value *scale, *t = nullptr, *p;  // t = tanh(S / cap) when softcapped
  Bias bias;
};

Recomputed recompute(GradContext& c) {
  const Node& n = c.node();
  Value *q = c.in(0), *past_k = c.in(4), *past_v = c.in(5);
  Recomputed f;
  int r = c.rank(q);
  ONYX_CHECK(r == 3 || r == 4,
             "{}: the rank of Q '{}' must be known (3 or 4) to build the gradient, but is {}",
             c.label(), q->name, r < 0 ? std::string("unknown") : std::to_string(r));
  f.three = r == 3;
  f.hq = n.attr_int("q_num_heads", 0);
  int64_t hk = n.attr_int("kv_num_heads", 0);
  ONYX_CHECK(!f.three || (f.hq > 0 && hk > 0), "{}: 3-D inputs need q_num_heads and kv_num_heads",
             c.label());
  f.q4 = f.three ? split_heads(c, q, f.hq) : q;
  Value* k4 = f.three ? split_heads(c, c.in(1), hk) : c.in(1);
  Value* v4 = f.three ? split_heads(c, c.in(2), hk) : c.in(2);
  f.kf = past_k ? c.op("Concat", {past_k, k4}, {axis_attr(2)}) : k4;
  f.vf = past_v ? c.op("Concat", {past_v, v4}, {axis_attr(2)}) : v4;
  auto nq = f.three ? std::optional<int64_t>(f.hq) : fixed_dim(c, q, 1);
  auto nk = f.three ? std::optional<int64_t>(hk) : fixed_dim(c, c.in(1), 1);
  f.grp.q4 = f.q4;
  f.grp.repeat = !(nq && nk && *nq == *nk);
  if (f.grp.repeat) f.grp.rep = c.op("Div", {dims(c, f.q4, 1, 2), dims(c, f.kf, 1, 2)});
  f.kr = f.grp.expand(c, f.kf);
  f.vr = f.grp.expand(c, f.vf);

  if (n.has_attr("scale")) {
    f.scale = c.scalar(n.attr_float("scale", 1.0f), q);
  } else if (auto d = f.three ? fixed_dim(c, q, 2) : fixed_dim(c, q, 3)) {
    f.scale = c.scalar(1.0 / std::sqrt(static_cast<double>(f.three ? *d / f.hq : *d)), q);
  } else {  // 1 / sqrt(head size) at run time
    f.scale = c.op("Reciprocal", {c.op("Sqrt", {c.cast_like(dims(c, f.q4, 3, 4), q)})});
  }
  Value* s = c.op("Mul", {c.op("MatMul", {f.q4, swap_last(c, f.kr)}), f.scale});
  if (double cap = n.attr_float("softcap", 0.0f); cap > 0) {
    f.t = c.op("Tanh", {c.op("Div", {s, c.scalar(cap, q)})});
    s = c.op("Mul", {f.t, c.scalar(cap, q)});
  }
  f.bias = attention_bias(c, f.q4, f.kf, past_k);
  if (f.bias.total) s = c.op("Add", {s, f.bias.total});
  f.p = c.op("Softmax", {s}, {axis_attr(-1)});
  if (f.bias.total) {
    // A row whose bias masks every key attends nothing: zeros, as the kernel gives, not NaN.
    Value* top = c.reduce("ReduceMax", f.bias.total, {-1}, true);
    Value* dead = c.op("Equal", {top, c.scalar(-std::numeric_limits<double>::infinity(), q)});
    f.p = c.op("Where", {dead, c.scalar(0.0, q), f.p});
  }
  return f;
}

// With S = scale * Q K^T (softcapped: cap * tanh(S / cap)), P = softmax(S + bias), Y = P V:
// dV = P^T dY, dP = dY V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale * dS K, dK = scale *
// dS^T Q, d attn_mask = dS (float masks); KV gradients are summed over each group of q heads,
// plus what reaches present_key / present_value, then split between the past and the new keys.
void attention_grad(GradContext& c) {
  ONYX_CHECK(!c.dout(3),
             "{}: a loss reads qk_matmul_output (output 3), whose gradient is not supported; "
             "differentiate through Y (and present_key / present_value) only",
             c.label());
  Value *q = c.in(0), *past_k = c.in(4);
  bool want_k = c.wants(1) || c.wants(4), want_v = c.wants(2) || c.wants(5);
  Value *dkf = c.dout(1), *dvf = c.dout(2);
  auto add_opt = [&](Value* a, Value* b) { return !a ? b : !b ? a : c.op("Add", {a, b}); };
  bool three = c.rank(q) == 3;
  if (Value* dy0 = c.dout(0)) {
    Recomputed f = recompute(c);
    Value* dy = three ? split_heads(c, dy0, f.hq) : dy0;
    if (want_v) dvf = add_opt(dvf, f.grp.reduce(c, c.op("MatMul", {swap_last(c, f.p), dy}), f.vf));
    if (c.wants(0) || want_k || c.wants(3)) {
      Value* dp = c.op("MatMul", {dy, swap_last(c, f.vr)});
      Value* rows = c.reduce("ReduceSum", c.op("Mul", {f.p, dp}), {-1}, true);
      Value* ds = c.op("Mul", {f.p, c.op("Sub", {dp, rows})});
      if (c.wants(3)) {
        ONYX_CHECK(f.bias.mask, "{}: a boolean attn_mask has no gradient", c.label());
        Value* g = ds;
        if (f.bias.mask_len) g = c.op("Slice", {g, c.ints({0}), f.bias.mask_len, c.ints({-1})});
        g = c.sum_to(g, c.in(3));
        c.set_din(3, c.dtype(c.in(3)) == c.dtype(q) ? g : c.cast_like(g, c.in(3)));
      }
      if (f.t) ds = c.op("Mul", {ds, c.op("Sub", {c.scalar(1.0, q), c.op("Mul", {f.t, f.t})})});
      ds = c.op("Mul", {ds, f.scale});
      if (c.wants(0)) {
        Value* dq = c.op("MatMul", {ds, f.kr});
        c.set_din(0, three ? merge_heads(c, dq) : dq);
      }
      if (want_k)
        dkf = add_opt(dkf, f.grp.reduce(c, c.op("MatMul", {swap_last(c, ds), f.q4}), f.kf));
    }
  }
  // Each [B, Hk, Skv, D] cache gradient splits into the past's part and the new keys' part.
  Value* past_len = past_k ? dims(c, past_k, 2, 3) : nullptr;
  auto split = [&](Value* g, int new_in, int past_in) {
    if (!g) return;
    if (past_k && c.wants(past_in)) c.set_din(past_in, seq_slice(c, g, c.ints({0}), past_len));
    if (!c.wants(new_in)) return;
    if (past_k) g = seq_slice(c, g, past_len, c.ints({INT64_MAX}));
    c.set_din(new_in, three ? merge_heads(c, g) : g);
  };
  if (want_k) split(dkf, 1, 4);
  if (want_v) split(dvf, 2, 5);
  // Inputs that only an output the loss does not depend on reads (Q when only present_key is).
  for (int i : {0, 1, 2, 3, 4, 5})
    if (c.wants(i) && !c.dins()[i])
      c.set_din(i, c.op("Expand", {c.scalar(0.0, c.in(i)), c.shape_of(c.in(i))}));
}

// RotaryEmbedding rotates each channel pair (x1, x2) by its position's angle; the adjoint is
// the rotation by minus that angle, i.e. RotaryEmbedding of dY with the sine cache negated.
// The channels past rotary_embedding_dim pass through, as does their gradient.
void rotary_embedding_grad(GradContext& c) {
  if (!c.wants(0)) return;
  std::vector<Value*> ins = {c.dout(0), c.in(1), c.op("Neg", {c.in(2)})};
  if (c.in(3)) ins.push_back(c.in(3));
  Attrs attrs;
  for (const auto& [name, a] : c.node().attrs) attrs.push_back(a);
  c.set_din(0, c.op("RotaryEmbedding", ins, attrs));
}

}  // namespace

void add_attention_rules(RuleTable& t) {
  t.add("Attention", attention_grad);
  t.add("RotaryEmbedding", rotary_embedding_grad);
}

}  // namespace onyx::autodiff
