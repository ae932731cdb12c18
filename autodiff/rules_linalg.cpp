// Gradient rules: linalg ops. Each operand's gradient is another product of the same kind
// (MatMul, Gemm, Einsum) with dy, summed over the batch dims the operand was broadcast along.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

/// Sets v's static type (so sum_to can reduce statically) and returns v.
Value* typed(Value* v, DataType dt, std::optional<SymShape> s) {
  v->type = ValueType::tensor(dt, std::move(s));
  return v;
}

/// Numpy broadcast of two static shapes; a dim neither side pins down becomes unknown.
SymShape broadcast(const SymShape& a, const SymShape& b) {
  size_t r = std::max(a.size(), b.size());
  SymShape out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim one = Dim::fixed(1);
    const Dim& da = i + a.size() >= r ? a[i + a.size() - r] : one;
    const Dim& db = i + b.size() >= r ? b[i + b.size() - r] : one;
    if (da == db || db == one)
      out[i] = da;
    else if (da == one)
      out[i] = db;
    else
      out[i] = Dim{};
  }
  return out;
}

/// Static shape of x; onyx::Error when its rank is unknown.
SymShape known_shape(const GradContext& c, const Value* x) {
  const auto& s = c.sym_shape(x);
  ONYX_CHECK(s.has_value(),
             "{}: the rank of input '{}' must be known to build its gradient, but "
             "shape inference could not tell it",
             c.label(), x->name);
  return *s;
}

/// Transpose of the last two axes of a rank-r value.
Value* swap_last2(GradContext& c, Value* v, size_t r) {
  std::vector<int64_t> perm;
  for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(i));
  std::swap(perm[r - 2], perm[r - 1]);
  return c.op("Transpose", {v}, {Attribute::of_ints("perm", perm)});
}

/// Reshape(v, [-1, last dim of `of`]): folds all leading dims into one row dim.
Value* rows(GradContext& c, Value* v, Value* of, const SymShape& of_shape) {
  const Dim& last = of_shape.back();
  Value* shape =
      last.is_fixed()
          ? c.ints({-1, last.value})
          : c.op("Concat",
                 {c.ints({-1}), c.op("Slice", {c.shape_of(of), c.ints({-1}), c.ints({INT64_MAX})})},
                 {Attribute::of_int("axis", 0)});
  return c.op("Reshape", {v, shape});
}

Value* gemm(GradContext& c, Value* a, Value* b, bool ta, bool tb, double alpha) {
  Attrs attrs;
  if (ta) attrs.push_back(Attribute::of_int("transA", 1));
  if (tb) attrs.push_back(Attribute::of_int("transB", 1));
  if (alpha != 1.0) attrs.push_back(Attribute::of_float("alpha", alpha));
  return c.op("Gemm", {a, b}, attrs);
}

// d MatMul(a, b) = dy b^T, a^T dy (1-D operands promoted to [1,K] / [K,1]; batch dims summed)
void matmul_grad(GradContext& c) {
  Value *A = c.in(0), *B = c.in(1), *g = c.dout(0);
  DataType dt = c.dtype(A);
  SymShape sa = known_shape(c, A), sb = known_shape(c, B);
  ONYX_CHECK(!sa.empty() && !sb.empty(), "{}: MatMul operands must have rank >= 1", c.label());
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  // Promote 1-D operands as MatMul does, and give dy the dims they dropped.
  Value *a = A, *b = B;
  if (b1) {
    sb = {sb[0], Dim::fixed(1)};
    b = typed(c.op("Unsqueeze", {B, c.ints({1})}), dt, sb);
    g = c.op("Unsqueeze", {g, c.ints({-1})});
  }
  if (a1) {
    sa = {Dim::fixed(1), sa[0]};
    a = typed(c.op("Unsqueeze", {A, c.ints({0})}), dt, sa);
    g = c.op("Unsqueeze", {g, c.ints({-2})});
  }
  SymShape batch =
      broadcast(SymShape(sa.begin(), sa.end() - 2), SymShape(sb.begin(), sb.end() - 2));
  const Dim M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  if (c.wants(0)) {
    SymShape s = batch;
    s.insert(s.end(), {M, K});
    Value* full = typed(c.op("MatMul", {g, swap_last2(c, b, sb.size())}), dt, s);
    Value* da = c.sum_to(full, a);
    c.set_din(0, a1 ? c.op("Squeeze", {da, c.ints({0})}) : da);
  }
  if (c.wants(1)) {
    if (!a1 && !b1 && sb.size() == 2) {
      // A shared 2-D weight: fold the batch into rows, one Gemm instead of a batched sum.
      Value* a2 = sa.size() == 2 ? A : rows(c, A, A, sa);
      Value* g2 = sa.size() == 2 ? g : rows(c, g, B, sb);
      return c.set_din(1, gemm(c, a2, g2, true, false, 1.0));
    }
    SymShape s = batch;
    s.insert(s.end(), {K, N});
    Value* full = typed(c.op("MatMul", {swap_last2(c, a, sa.size()), g}), dt, s);
    Value* db = c.sum_to(full, b);
    c.set_din(1, b1 ? c.op("Squeeze", {db, c.ints({-1})}) : db);
  }
}

// d Gemm: Y = alpha A' B' + beta C  =>  dA' = alpha dY B'^T, dB' = alpha A'^T dY, dC = beta dY
void gemm_grad(GradContext& c) {
  const Node& n = c.node();
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const double alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  Value *A = c.in(0), *B = c.in(1), *dy = c.dout(0);
  // Each case written as one Gemm with the transposes folded into its flags.
  if (c.wants(0))
    c.set_din(0, ta ? gemm(c, B, dy, tb, true, alpha) : gemm(c, dy, B, false, !tb, alpha));
  if (c.wants(1))
    c.set_din(1, tb ? gemm(c, dy, A, true, ta, alpha) : gemm(c, A, dy, !ta, false, alpha));
  if (c.wants(2)) {
    Value* dc = c.sum_to(dy, c.in(2));
    if (beta != 1.0) dc = c.op("Mul", {dc, c.scalar(beta, dy)});
    c.set_din(2, dc);
  }
}

// ---- Einsum ----

constexpr char kEllipsis = '.';  // stands for "..." inside a parsed term

struct EinsumEq {
  std::vector<std::string> inputs;  // one string per operand, "..." as a single '.'
  std::string output;
};

EinsumEq parse_einsum(const GradContext& c, const std::string& text) {
  std::string eq;
  for (char ch : text)
    if (ch != ' ') eq += ch;
  auto term = [&](std::string t) {
    size_t p = t.find("...");
    if (p != std::string::npos) t.replace(p, 3, std::string(1, kEllipsis));
    for (char ch : t)
      ONYX_CHECK(std::isalpha(static_cast<unsigned char>(ch)) || ch == kEllipsis,
                 "{}: cannot parse term '{}' of equation '{}'", c.label(), t, text);
    ONYX_CHECK(std::count(t.begin(), t.end(), kEllipsis) <= 1,
               "{}: term '{}' of equation '{}' "
               "has more than one ellipsis",
               c.label(), t, text);
    return t;
  };
  EinsumEq e;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    e.inputs.push_back(term(lhs.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (arrow != std::string::npos) {
    e.output = term(eq.substr(arrow + 2));
    return e;
  }
  // Implicit output: "..." first, then the letters used once, in alphabetical order.
  std::string all;
  for (const auto& t : e.inputs) all += t;
  if (all.find(kEllipsis) != std::string::npos) e.output += kEllipsis;
  std::set<char> once;
  for (char ch : all)
    if (ch != kEllipsis && std::count(all.begin(), all.end(), ch) == 1) once.insert(ch);
  e.output.insert(e.output.end(), once.begin(), once.end());
  return e;
}

std::string with_ellipsis(const std::string& t) {
  std::string s;
  for (char ch : t) {
    if (ch == kEllipsis)
      s.append("...");
    else
      s.push_back(ch);
  }
  return s;
}

/// The dims of x (rank known) that each position of term t names: for letters, one index;
/// the ellipsis covers rank - (|t| - 1) dims. Returns the first dim index of t[k].
int64_t dim_of(const std::string& t, size_t k, int64_t rank) {
  size_t e = t.find(kEllipsis);
  if (e == std::string::npos || k < e) return static_cast<int64_t>(k);
  int64_t ne = rank - static_cast<int64_t>(t.size() - 1);
  return static_cast<int64_t>(k) - 1 + ne;
}

/// The dims operand j's "..." stands for (empty when its term has none); its rank must be known.
SymShape ellipsis_dims(const GradContext& c, const EinsumEq& eq, int j) {
  const std::string& t = eq.inputs[j];
  size_t p = t.find(kEllipsis);
  if (p == std::string::npos) return {};
  SymShape xs = known_shape(c, c.in(j));
  size_t e = xs.size() + 1 - t.size();
  ONYX_CHECK(xs.size() + 1 >= t.size(), "{}: input '{}' has rank {}, too low for term '{}'",
             c.label(), c.in(j)->name, xs.size(), t);
  return SymShape(xs.begin() + static_cast<int64_t>(p), xs.begin() + static_cast<int64_t>(p + e));
}

/// gx is operand i's gradient with the output's ellipsis dims in place of its own: sums the
/// leading ellipsis dims it lacks and its size-1 ellipsis dims that were broadcast.
Value* reduce_broadcast_ellipsis(GradContext& c, Value* gx, int i, const EinsumEq& eq) {
  // The output's "..." is the broadcast of every operand's.
  SymShape ys;
  for (int j = 0; j < c.node().num_inputs(); ++j) ys = broadcast(ys, ellipsis_dims(c, eq, j));
  SymShape xs = ellipsis_dims(c, eq, i);
  const auto p = static_cast<int64_t>(eq.inputs[i].find(kEllipsis));
  const auto e_in = static_cast<int64_t>(xs.size()), e_out = static_cast<int64_t>(ys.size());
  std::vector<int64_t> extra, ones;
  for (int64_t k = 0; k < e_out - e_in; ++k) extra.push_back(p + k);
  for (int64_t k = 0; k < e_in; ++k) {
    const Dim& xd = xs[k];
    const Dim& yd = ys[e_out - e_in + k];
    if (xd.is_fixed() && xd.value == 1) {
      ones.push_back(p + e_out - e_in + k);  // harmless when nothing was broadcast there
      continue;
    }
    ONYX_CHECK(xd.is_fixed() || (xd == yd && !xd.param.empty()),
               "{}: cannot tell whether "
               "ellipsis dim {} of input '{}' ({}) was broadcast (to {}); give it a static or "
               "named size",
               c.label(), k, c.in(i)->name, xd.str(), yd.str());
  }
  if (!ones.empty()) gx = c.op("ReduceSum", {gx, c.ints(ones)}, {Attribute::of_int("keepdims", 1)});
  if (!extra.empty()) gx = c.op("ReduceSum", {gx, c.ints(extra)}, {Attribute::of_int("keepdims", 0)});
  return gx;
}

// d Einsum wrt operand i = Einsum(dy, other operands -> term_i), with ones for letters only
// term_i has (broadcast back), identities for its repeated letters (diagonals), and a sum
// over the ellipsis dims operand i was broadcast along.
void einsum_grad(GradContext& c) {
  const Node& n = c.node();
  EinsumEq eq = parse_einsum(c, n.require_attr("equation", Attribute::Type::String).s);
  ONYX_CHECK(static_cast<int>(eq.inputs.size()) == n.num_inputs(),
             "{}: equation '{}' has {} "
             "operands but the node has {} inputs",
             c.label(), n.attr_string("equation", ""), eq.inputs.size(), n.num_inputs());
  std::set<char> used;
  for (const auto& t : eq.inputs) used.insert(t.begin(), t.end());
  Value* dy = c.dout(0);
  for (int i = 0; i < n.num_inputs(); ++i) {
    if (!c.wants(i)) continue;
    Value* x = c.in(i);
    const std::string& ti = eq.inputs[i];
    const bool ell = ti.find(kEllipsis) != std::string::npos;
    ONYX_CHECK(!ell || eq.output.find(kEllipsis) != std::string::npos,
               "{}: equation '{}' sums "
               "over the ellipsis dims; its gradient is not supported (name the dims with letters)",
               c.label(), n.attr_string("equation", ""));
    std::vector<std::string> terms = {eq.output};
    std::vector<Value*> ins = {dy};
    std::string avail = eq.output;
    for (int j = 0; j < n.num_inputs(); ++j)
      if (j != i) {
        terms.push_back(eq.inputs[j]);
        ins.push_back(c.in(j));
        avail += eq.inputs[j];
      }
    // Letters only operand i has were summed away: broadcast them back with a ones tensor.
    int64_t rank = ell ? static_cast<int64_t>(c.rank(x)) : static_cast<int64_t>(ti.size());
    ONYX_CHECK(rank >= 0, "{}: the rank of input '{}' must be known for its gradient", c.label(),
               x->name);
    std::string lonely;
    std::vector<int64_t> lonely_dims;
    std::string out;
    std::vector<std::pair<char, char>> diag;  // (letter, fresh letter for its repeat)
    for (size_t k = 0; k < ti.size(); ++k) {
      char l = ti[k];
      bool first = ti.find(l) == k;
      if (l != kEllipsis && first && avail.find(l) == std::string::npos) {
        lonely += l;
        lonely_dims.push_back(dim_of(ti, k, rank));
      }
      if (first) {
        out += l;
        continue;
      }
      // A repeated letter (a diagonal): a fresh output letter tied to it by an identity.
      char fresh = 0;
      for (char f : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"))
        if (!used.count(f)) {
          fresh = f;
          break;
        }
      ONYX_CHECK(fresh, "{}: no spare letter left to express the gradient", c.label());
      used.insert(fresh);
      diag.emplace_back(l, fresh);
      out += fresh;
    }
    if (!lonely.empty()) {
      terms.push_back(lonely);
      ins.push_back(
          c.op("Expand", {c.scalar(1.0, x), c.op("Gather", {c.shape_of(x), c.ints(lonely_dims)})}));
    }
    for (auto [l, f] : diag) {
      int64_t d = dim_of(ti, ti.find(l), rank);
      Value* nn = c.op("Gather", {c.shape_of(x), c.ints({d, d})});
      terms.push_back(std::string{l, f});
      ins.push_back(c.op("EyeLike", {c.op("Expand", {c.scalar(0.0, x), nn})}));
    }
    std::string grad_eq;
    for (size_t k = 0; k < terms.size(); ++k) {
      if (k) grad_eq.push_back(',');
      grad_eq.append(with_ellipsis(terms[k]));
    }
    grad_eq.append("->").append(with_ellipsis(out));
    Value* gx = c.op("Einsum", ins, {Attribute::of_string("equation", grad_eq)});
    if (ell) gx = reduce_broadcast_ellipsis(c, gx, i, eq);
    c.set_din(i, gx);
  }
}

}  // namespace

void add_linalg_rules(RuleTable& t) {
  t.add("MatMul", matmul_grad);
  t.add("Gemm", gemm_grad);
  t.add("Einsum", einsum_grad);
}

}  // namespace onyx::autodiff
