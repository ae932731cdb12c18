#include "graph/shape_inference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <cctype>
#include <unordered_map>

#include "graph/schema.h"
#include "graph/shape_values.h"

namespace onyx {
namespace {

// "tensor(float)" -> Float; "seq(tensor(int64))" etc. -> Undefined.
DataType tensor_type_of(const std::string& ts) {
  if (ts.rfind("tensor(", 0) != 0) return DataType::Undefined;
  std::string n = ts.substr(7, ts.size() - 8);
  if (n == "string") return DataType::String;
  for (int i = 1; i <= 26; ++i)
    if (dtype_name(static_cast<DataType>(i)) == n) return static_cast<DataType>(i);
  return DataType::Undefined;
}

std::string type_string(const ValueType& t) {
  switch (t.kind) {
    case ValueType::Kind::Tensor: return fmt::format("tensor({})", dtype_name(t.elem));
    case ValueType::Kind::Sequence: return t.inner ? fmt::format("seq({})", type_string(*t.inner)) : "";
    case ValueType::Kind::Optional:
      return t.inner ? fmt::format("optional({})", type_string(*t.inner)) : "";
    default: return "";
  }
}

bool fully_known(const ValueType& t) {
  if (t.kind == ValueType::Kind::Tensor) return t.elem != DataType::Undefined;
  if (t.kind == ValueType::Kind::Sequence || t.kind == ValueType::Kind::Optional)
    return t.inner && fully_known(*t.inner);
  return false;
}

struct Ctx {
  const Node& node;
  const Graph& graph;
  std::vector<ValueType> out;  // proposed output types (kind Unknown = no opinion)
  const shape_values::Known& known;  // propagated contents of shape tensors

  const ValueType* in(int i) const {
    return node.has_input(i) ? &node.inputs[i]->type : nullptr;
  }
  const SymShape* in_shape(int i) const {
    const ValueType* t = in(i);
    return t && t->is_tensor() && t->shape ? &*t->shape : nullptr;
  }
  // The contents of integer input i (a constant or a propagated shape computation).
  std::optional<shape_values::Ints> ints_in(int i) const {
    return node.has_input(i) ? shape_values::lookup(known, graph, node.inputs[i]) : std::nullopt;
  }
  // The values of integer input i when every element is known.
  std::optional<std::vector<int64_t>> values_in(int i) const {
    auto v = ints_in(i);
    return v ? v->values() : std::nullopt;
  }
  // Axes as input 1 (opset >= 13 forms; nullopt when its values are unknown) or attribute.
  std::optional<std::vector<int64_t>> axes() const {
    if (node.has_input(1)) return values_in(1);
    return node.attr_ints("axes");
  }
  // The length of 1-D input i when its shape is known (a shape tensor's length is a rank).
  std::optional<int64_t> length_of(int i) const {
    auto s = in_shape(i);
    if (!s || s->size() != 1 || !(*s)[0].is_fixed()) return std::nullopt;
    return (*s)[0].value;
  }
  void set_shape(int o, SymShape s) {
    if (o < static_cast<int>(out.size())) out[o].shape = std::move(s);
  }
};

SymShape fixed(const Shape& s) {
  SymShape r;
  for (int64_t d : s) r.push_back(Dim::fixed(d));
  return r;
}

int64_t norm_axis(int64_t a, size_t rank) { return a < 0 ? a + static_cast<int64_t>(rank) : a; }

// An axis a rule is about to index a shape with, checked against [-rank, rank) ([-rank, rank]
// with `end_ok`, as Flatten's; Unsqueeze passes its output rank): a bad one is the model's
// error, named here once at load rather than read out of bounds. `what` names its source
// ("attribute 'axis'", "input 'axes'").
int64_t checked_axis(const Ctx& c, const std::string& what, int64_t a, size_t rank,
                     bool end_ok = false) {
  const int64_t r = static_cast<int64_t>(rank), hi = end_ok ? r : r - 1;
  const SymShape* in = c.in_shape(0);
  ONYX_CHECK(a >= -r && a <= hi, "[{}] {} holds axis {}, outside [{}, {}] for input shape {}",
             c.node.label(), what, a, -r, hi, in ? sym_shape_str(*in) : "?");
  return a < 0 ? a + r : a;
}

// Dimension arithmetic on sizes a model declares: a result beyond int64 is the model's error
// (signed overflow would be undefined behaviour, and a wrapped size a wrong allocation).
int64_t dim_mul(const Ctx& c, int64_t a, int64_t b) { return checked_dim_mul(a, b, c.node.label()); }
int64_t dim_add(const Ctx& c, int64_t a, int64_t b) {
  int64_t r;
  ONYX_CHECK(!__builtin_add_overflow(a, b, &r), "[{}] an output dimension overflows int64: {} + {}",
             c.node.label(), a, b);
  return r;
}
/// A size computed in 128 bits (window arithmetic), back in int64 or an onyx::Error.
int64_t dim_narrow(const Ctx& c, __int128 v) {
  ONYX_CHECK(v >= INT64_MIN && v <= INT64_MAX, "[{}] an output dimension overflows int64", c.node.label());
  return static_cast<int64_t>(v);
}

// checked_axis for every entry of an axes list, which may not name an axis twice.
std::vector<int64_t> checked_axes(const Ctx& c, const std::string& what, std::vector<int64_t> axes,
                                  size_t rank) {
  std::vector<bool> seen(rank, false);
  for (int64_t& a : axes) {
    a = checked_axis(c, what, a, rank);
    ONYX_CHECK(!seen[static_cast<size_t>(a)], "[{}] {} names axis {} twice: [{}]", c.node.label(),
               what, a, fmt::join(axes, ", "));
    seen[static_cast<size_t>(a)] = true;
  }
  return axes;
}

// The source of a rule's axes for messages: opset >= 13 forms take them as input 1.
std::string axes_source(const Ctx& c) {
  return c.node.has_input(1) ? "input 'axes'" : "attribute 'axes'";
}

using Rule = std::function<void(Ctx&)>;

void same_shape(Ctx& c) {
  if (auto s = c.in_shape(0)) c.set_shape(0, *s);
}

void broadcast_all(Ctx& c) {
  std::optional<SymShape> acc;
  for (int i = 0; i < c.node.num_inputs(); ++i) {
    auto s = c.in_shape(i);
    if (!s) return;
    acc = acc ? broadcast_shapes(*acc, *s) : *s;
    if (!acc) return;  // left to the kernel, which knows each opset's broadcasting rule
  }
  if (acc) c.set_shape(0, *acc);
}

void matmul(Ctx& c) {
  auto a = c.in_shape(0), b = c.in_shape(1);
  if (!a || !b || a->empty() || b->empty()) return;
  SymShape A = *a, B = *b;
  bool va = A.size() == 1, vb = B.size() == 1;
  if (va) A.insert(A.begin(), Dim::fixed(1));
  if (vb) B.push_back(Dim::fixed(1));
  SymShape ba(A.begin(), A.end() - 2), bb(B.begin(), B.end() - 2);
  auto batch = broadcast_shapes(ba, bb);
  if (!batch) return;
  SymShape r = *batch;
  if (!va) r.push_back(A[A.size() - 2]);
  if (!vb) r.push_back(B.back());
  c.set_shape(0, r);
}

// Einsum: each output letter takes its dim from the inputs that have it (a fixed dim other
// than 1 wins over 1 and over an unknown one, as broadcasting does); "..." is the broadcast of
// the inputs' ellipsis dims. Without "->" the output is the ellipsis dims, then the letters
// that appear once, in alphabetical order. An equation that does not fit the inputs is left to
// the kernel to refuse.
void einsum(Ctx& c) {
  std::string eq;
  for (char ch : c.node.attr_string("equation", ""))
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char ch : lhs) {
    if (ch == ',')
      terms.emplace_back();
    else
      terms.back().push_back(ch);
  }
  if (static_cast<int>(terms.size()) != c.node.num_inputs()) return;
  std::map<char, Dim> dims;
  std::map<char, int> count;
  std::optional<SymShape> ell;
  bool any_ellipsis = false;
  for (size_t i = 0; i < terms.size(); ++i) {
    const SymShape* s = c.in_shape(static_cast<int>(i));
    if (!s) return;
    const std::string& t = terms[i];
    const size_t dots = t.find("...");
    const int64_t letters = static_cast<int64_t>(t.size()) - (dots == std::string::npos ? 0 : 3);
    const int64_t ell_rank = static_cast<int64_t>(s->size()) - letters;
    if (ell_rank < 0 || (dots == std::string::npos && ell_rank != 0)) return;
    size_t k = 0;
    for (size_t j = 0; j < t.size(); ++j) {
      if (t[j] == '.') {
        if (j != dots) return;
        any_ellipsis = true;
        SymShape e(s->begin() + static_cast<int64_t>(k), s->begin() + static_cast<int64_t>(k) + ell_rank);
        ell = ell ? broadcast_shapes(*ell, e) : e;
        if (!ell) return;
        k += static_cast<size_t>(ell_rank);
        j += 2;
        continue;
      }
      if (!std::isalpha(static_cast<unsigned char>(t[j]))) return;
      const Dim& d = (*s)[k++];
      ++count[t[j]];
      auto [it, fresh] = dims.emplace(t[j], d);
      const Dim& have = it->second;
      if (!fresh && ((have.is_fixed() && have.value == 1) || (!have.is_fixed() && d.is_fixed())))
        it->second = d;
    }
  }
  std::string rhs;
  if (arrow != std::string::npos) {
    rhs = eq.substr(arrow + 2);
  } else {
    if (any_ellipsis) rhs = "...";
    for (const auto& [ch, n] : count)  // std::map: alphabetical (upper case first, as numpy)
      if (n == 1) rhs += ch;
  }
  SymShape r;
  for (size_t j = 0; j < rhs.size(); ++j) {
    if (rhs[j] == '.') {
      if (rhs.compare(j, 3, "...") != 0) return;
      if (ell) r.insert(r.end(), ell->begin(), ell->end());
      j += 2;
      continue;
    }
    auto it = dims.find(rhs[j]);
    if (it == dims.end()) return;
    r.push_back(it->second);
  }
  c.set_shape(0, r);
}

void transpose(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  auto perm = c.node.attr_ints("perm");
  SymShape r;
  if (!c.node.has_attr("perm")) {
    r.assign(s->rbegin(), s->rend());
  } else {
    ONYX_CHECK(perm.size() == s->size(),
               "[{}] attribute 'perm' [{}] has {} entries, but the input has rank {}",
               c.node.label(), fmt::join(perm, ", "), perm.size(), s->size());
    for (int64_t p : checked_axes(c, "attribute 'perm'", perm, s->size())) r.push_back((*s)[p]);
  }
  c.set_shape(0, r);
}

void shape_op(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  int64_t r = static_cast<int64_t>(s->size());
  int64_t start = norm_axis(c.node.attr_int("start", 0), s->size());
  int64_t end = c.node.has_attr("end") ? norm_axis(c.node.attr_int("end", r), s->size()) : r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  c.set_shape(0, {Dim::fixed(std::max<int64_t>(0, end - start))});
}

SymShape unknown_dims(int64_t rank) { return SymShape(static_cast<size_t>(rank), Dim{}); }

// Reshape's target from the shape input's contents (0 copies the input dim unless allowzero,
// -1 is inferred from the element count when every other dim is known); with the contents
// unknown, the shape input's length still gives the rank.
void reshape(Ctx& c) {
  auto target = c.ints_in(1);
  if (!target || target->scalar) {
    if (auto n = c.length_of(1)) c.set_shape(0, unknown_dims(*n));
    return;
  }
  auto s = c.in_shape(0);
  bool allowzero = c.node.attr_int("allowzero", 0) != 0;
  SymShape r;
  int infer = -1;
  for (size_t i = 0; i < target->v.size(); ++i) {
    const auto& t = target->v[i];
    if (t.known() && *t.value == 0 && !allowzero) {
      r.push_back(s && i < s->size() ? (*s)[i] : Dim{});
    } else if (t.known() && *t.value == -1) {
      infer = static_cast<int>(i);
      r.push_back(Dim{});
    } else {
      r.push_back(t.dim());
    }
  }
  if (infer >= 0 && s) {
    // Fixed dims and symbols' coefficients multiply; a named symbol of the target cancels one
    // of the input's, since both stand for the same run-time value ([12*batch, 1, 128] ->
    // [batch, 12, -1, 128]: -1 is 1 whatever batch is, as torch's attention mask is reshaped).
    int64_t total = 1, known = 1;
    std::vector<std::string> symbols;  // the input's, not cancelled yet
    for (const auto& d : *s) {
      if (d.is_fixed()) {
        total = dim_mul(c, total, d.value);
      } else if (!d.param.empty()) {
        const shape_values::ScaledSymbol sym = shape_values::split_symbol(d.param);
        total = dim_mul(c, total, sym.coef);
        symbols.push_back(sym.name);
      } else {
        return c.set_shape(0, r);
      }
    }
    for (size_t i = 0; i < r.size(); ++i) {
      const Dim& d = r[i];
      if (static_cast<int>(i) == infer) continue;
      if (d.is_fixed()) {
        known = dim_mul(c, known, d.value);
        continue;
      }
      const shape_values::ScaledSymbol sym = shape_values::split_symbol(d.param);
      auto it = std::find(symbols.begin(), symbols.end(), sym.name);
      if (d.param.empty() || it == symbols.end()) return c.set_shape(0, r);
      known = dim_mul(c, known, sym.coef);
      symbols.erase(it);
    }
    if (known > 0 && symbols.empty())
      r[infer] = Dim::fixed(total / known);
    else if (known > 0 && symbols.size() == 1 && total % known == 0)
      r[infer] = Dim::symbol(shape_values::scaled_symbol(total / known, symbols[0]));
  }
  c.set_shape(0, r);
}

// Expand: numpy broadcast of the input's shape and the target shape's contents (its length
// at least gives the rank).
void expand(Ctx& c) {
  auto s = c.in_shape(0);
  auto target = c.ints_in(1);
  if (target && !target->scalar) {
    SymShape t;
    for (const auto& x : target->v) t.push_back(x.dim());
    if (!s) return;
    // A 1 in the target keeps the input's dim: broadcast_shapes does exactly that.
    if (auto r = broadcast_shapes(*s, t)) c.set_shape(0, *r);
    return;
  }
  if (auto n = c.length_of(1); n && s)
    c.set_shape(0, unknown_dims(std::max<int64_t>(*n, static_cast<int64_t>(s->size()))));
}

void tile(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  SymShape r(s->size());
  auto reps = c.ints_in(1);
  for (size_t i = 0; i < s->size(); ++i) {
    const auto rep = reps && reps->v.size() == s->size() ? reps->v[i].value : std::nullopt;
    if (rep && *rep == 1) r[i] = (*s)[i];
    else if (rep && (*s)[i].is_fixed()) r[i] = Dim::fixed(dim_mul(c, (*s)[i].value, *rep));
  }
  c.set_shape(0, r);
}

// Squeeze: the axes (input 1, or the attribute before opset 13), else every fixed 1.
void squeeze(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  auto known_axes = c.axes();
  if (!known_axes) return;
  const std::vector<int64_t>& axes = *known_axes;
  std::vector<bool> drop(s->size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < s->size(); ++i) {
      if (!(*s)[i].is_fixed()) return;  // might be 1 at run time
      drop[i] = (*s)[i].value == 1;
    }
  }
  for (int64_t a : axes)
    drop[static_cast<size_t>(checked_axis(c, axes_source(c), a, s->size()))] = true;
  SymShape r;
  for (size_t i = 0; i < s->size(); ++i)
    if (!drop[i]) r.push_back((*s)[i]);
  c.set_shape(0, r);
}

// Slice (opset >= 10: starts/ends/axes/steps as inputs): dims of sliced axes when the input
// dim and the bounds are known, unknown otherwise; the rank is always the input's.
void slice(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  SymShape r = *s;
  const int64_t rank = static_cast<int64_t>(s->size());
  if (c.node.num_inputs() < 3) return c.set_shape(0, unknown_dims(rank));  // opset < 10
  auto st = c.values_in(1), en = c.values_in(2);
  std::optional<std::vector<int64_t>> axes, steps;
  if (c.node.has_input(3)) {
    axes = c.values_in(3);
  } else if (st) {
    axes = std::vector<int64_t>(st->size());
    for (size_t i = 0; i < axes->size(); ++i) (*axes)[i] = static_cast<int64_t>(i);
  }
  if (c.node.has_input(4)) {
    steps = c.values_in(4);
  } else if (st) {
    steps = std::vector<int64_t>(st->size(), 1);
  }
  if (!st || !en || !axes || !steps || st->size() != en->size() || axes->size() != st->size() ||
      steps->size() != st->size()) {
    // Which axes are sliced is unknown without the axes: every dim may change.
    if (!axes) return c.set_shape(0, unknown_dims(rank));
    for (int64_t a : *axes)
      r[static_cast<size_t>(checked_axis(c, "input 'axes'", a, s->size()))] = Dim{};
    return c.set_shape(0, r);
  }
  for (size_t i = 0; i < axes->size(); ++i) {
    int64_t a = checked_axis(c, "input 'axes'", (*axes)[i], s->size());
    if ((*steps)[i] == 0) return;
    const Dim& d = (*s)[static_cast<size_t>(a)];
    if (!d.is_fixed()) {
      r[static_cast<size_t>(a)] = Dim{};
      continue;
    }
    const int64_t n = d.value, step = (*steps)[i];
    int64_t b = (*st)[i] < 0 ? (*st)[i] + n : (*st)[i];
    int64_t e = (*en)[i] < 0 ? (*en)[i] + n : (*en)[i];
    int64_t len;
    if (step > 0) {
      b = std::clamp<int64_t>(b, 0, n), e = std::clamp<int64_t>(e, 0, n);
      len = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = std::clamp<int64_t>(b, -1, n - 1), e = std::clamp<int64_t>(e, -1, n - 1);
      len = b > e ? (b - e - step - 1) / -step : 0;
    }
    r[static_cast<size_t>(a)] = Dim::fixed(len);
  }
  c.set_shape(0, r);
}

void range(Ctx& c) {
  auto s = c.values_in(0), l = c.values_in(1), d = c.values_in(2);
  if (s && l && d && s->size() == 1 && l->size() == 1 && d->size() == 1 && (*d)[0] != 0) {
    // In double: limit - start may overflow int64, and a count past 2^62 stays unknown (the
    // kernel names it as an error).
    const double n = std::ceil((double((*l)[0]) - double((*s)[0])) / double((*d)[0]));
    if (n <= double(int64_t{1} << 62))
      return c.set_shape(0, {Dim::fixed(std::max<int64_t>(0, static_cast<int64_t>(n)))});
  }
  c.set_shape(0, {Dim{}});
}

// Split: the rank survives; the split axis has unknown dims unless the sizes are constant.
void split(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  int64_t axis = checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", 0), s->size());
  std::optional<std::vector<int64_t>> sizes;
  if (c.node.has_input(1)) {
    sizes = c.values_in(1);
  } else if (c.node.has_attr("split")) {
    sizes = c.node.attr_ints("split");
  }
  const Dim& d = (*s)[static_cast<size_t>(axis)];
  const int64_t n = static_cast<int64_t>(c.out.size());
  for (int64_t o = 0; o < n; ++o) {
    SymShape r = *s;
    if (sizes && static_cast<int64_t>(sizes->size()) == n)
      r[static_cast<size_t>(axis)] = Dim::fixed((*sizes)[static_cast<size_t>(o)]);
    else if (!sizes && d.is_fixed() && !c.node.has_attr("num_outputs") && d.value % n == 0)
      r[static_cast<size_t>(axis)] = Dim::fixed(d.value / n);
    else
      r[static_cast<size_t>(axis)] = Dim{};
    c.set_shape(static_cast<int>(o), r);
  }
}

void gemm(Ctx& c) {
  auto a = c.in_shape(0), b = c.in_shape(1);
  if (!a || !b || a->size() != 2 || b->size() != 2) return;
  Dim m = c.node.attr_int("transA", 0) ? (*a)[1] : (*a)[0];
  Dim n = c.node.attr_int("transB", 0) ? (*b)[0] : (*b)[1];
  c.set_shape(0, {m, n});
}

void flatten(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  int64_t axis = checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", 1), s->size(), true);
  auto prod = [&](size_t from, size_t to) -> Dim {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) {
      if (!(*s)[i].is_fixed()) return Dim{};
      p = dim_mul(c, p, (*s)[i].value);
    }
    return Dim::fixed(p);
  };
  c.set_shape(0, {prod(0, static_cast<size_t>(axis)), prod(static_cast<size_t>(axis), s->size())});
}

void concat(Ctx& c) {
  auto s0 = c.in_shape(0);
  if (!s0) return;
  int64_t axis = checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", 0), s0->size());
  SymShape r = *s0;
  for (int i = 1; i < c.node.num_inputs(); ++i) {
    auto s = c.in_shape(i);
    if (!s || s->size() != r.size()) return;
    Dim& d = r[axis];
    d = d.is_fixed() && (*s)[axis].is_fixed() ? Dim::fixed(dim_add(c, d.value, (*s)[axis].value)) : Dim{};
  }
  c.set_shape(0, r);
}

void gather(Ctx& c) {
  auto d = c.in_shape(0), i = c.in_shape(1);
  if (!d || !i) return;
  int64_t axis = checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", 0), d->size());
  SymShape r(d->begin(), d->begin() + axis);
  r.insert(r.end(), i->begin(), i->end());
  r.insert(r.end(), d->begin() + axis + 1, d->end());
  c.set_shape(0, r);
}

void unsqueeze(Ctx& c) {
  auto s = c.in_shape(0);
  auto known_axes = c.axes();
  if (!known_axes) return;
  const std::vector<int64_t>& axes = *known_axes;
  if (!s || axes.empty()) return;
  size_t out_rank = s->size() + axes.size();
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : checked_axes(c, axes_source(c), axes, out_rank)) inserted[a] = true;
  SymShape r;
  size_t k = 0;
  for (size_t i = 0; i < out_rank; ++i) r.push_back(inserted[i] ? Dim::fixed(1) : (*s)[k++]);
  c.set_shape(0, r);
}

void reduce(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  auto known_axes = c.axes();
  if (!known_axes) return;
  const std::vector<int64_t>& axes = *known_axes;
  bool keep = c.node.attr_int("keepdims", 1) != 0;
  if (axes.empty() && c.node.attr_int("noop_with_empty_axes", 0)) return same_shape(c);
  std::vector<bool> red(s->size(), axes.empty());
  for (int64_t a : axes) red[checked_axis(c, axes_source(c), a, s->size())] = true;
  SymShape r;
  for (size_t i = 0; i < s->size(); ++i)
    if (!red[i]) r.push_back((*s)[i]);
    else if (keep) r.push_back(Dim::fixed(1));
  c.set_shape(0, r);
}

void constant(Ctx& c) {
  if (const Attribute* a = c.node.attr("value"); a && a->type == Attribute::Type::Tensor) {
    c.out[0] = ValueType::tensor(a->t.dtype(), fixed(a->t.shape()));
    return;
  }
  static const std::pair<const char*, DataType> scalars[] = {
      {"value_float", DataType::Float}, {"value_int", DataType::Int64}, {"value_string", DataType::String}};
  for (auto [n, dt] : scalars)
    if (c.node.has_attr(n)) c.out[0] = ValueType::tensor(dt, SymShape{});
  static const std::pair<const char*, DataType> lists[] = {
      {"value_floats", DataType::Float}, {"value_ints", DataType::Int64}, {"value_strings", DataType::String}};
  for (auto [n, dt] : lists)
    if (const Attribute* a = c.node.attr(n))
      c.out[0] = ValueType::tensor(
          dt, SymShape{Dim::fixed(static_cast<int64_t>(std::max({a->floats.size(), a->ints.size(), a->strings.size()})))});
}

void cast(Ctx& c) {
  int64_t to = c.node.attr_int("to", 0);
  if (dtype_is_known(static_cast<int32_t>(to))) c.out[0] = ValueType::tensor(static_cast<DataType>(to));
  same_shape(c);
}

void cast_like(Ctx& c) {
  if (const ValueType* t = c.in(1); t && t->is_tensor()) c.out[0] = ValueType::tensor(t->elem);
  same_shape(c);
}

// LayerNormalization: Y like X; Mean and InvStdDev of dtype stash_type (a float type, else
// float as the kernel does), shaped X.shape[:axis] + 1s.
void layer_norm(Ctx& c) {
  same_shape(c);
  auto dt = static_cast<DataType>(c.node.attr_int("stash_type", 1));
  if (dt != DataType::Double && dt != DataType::Float16 && dt != DataType::BFloat16)
    dt = DataType::Float;
  const SymShape* s = c.in_shape(0);
  for (int o = 1; o <= 2 && o < static_cast<int>(c.out.size()); ++o) {
    c.out[o] = ValueType::tensor(dt);
    if (!s) continue;
    int64_t axis = checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", -1), s->size());
    SymShape r(s->begin(), s->begin() + axis);
    r.resize(s->size(), Dim::fixed(1));
    c.set_shape(o, r);
  }
}

// Attention (opset 23+): Y [B, Hq, Sq, Dv] (4-D inputs) or [B, Sq, Hq*Dv] (3-D, heads from
// q_num_heads / kv_num_heads); present_key/value [B, Hk, P+Skv, D]; qk_matmul_output
// [B, Hq, Sq, P+Skv].
void attention(Ctx& c) {
  auto q = c.in_shape(0), k = c.in_shape(1), v = c.in_shape(2);
  if (!q || !k || !v || q->size() != k->size() || q->size() != v->size()) return;
  auto div = [](const Dim& d, int64_t h) {
    return d.is_fixed() && h > 0 ? Dim::fixed(d.value / h) : Dim{};
  };
  SymShape y;
  Dim hq, hk, sq, skv, dq, dv;
  if (q->size() == 4) {
    hq = (*q)[1], hk = (*k)[1], sq = (*q)[2], skv = (*k)[2], dq = (*q)[3], dv = (*v)[3];
    y = {(*q)[0], hq, sq, dv};
  } else if (q->size() == 3) {
    int64_t nq = c.node.attr_int("q_num_heads", 0), nk = c.node.attr_int("kv_num_heads", 0);
    if (nq <= 0 || nk <= 0) return;
    hq = Dim::fixed(nq), hk = Dim::fixed(nk), sq = (*q)[1], skv = (*k)[1];
    dq = div((*q)[2], nq), dv = div((*v)[2], nk);
    Dim hidden = nq == nk ? (*v)[2] : dv.is_fixed() ? Dim::fixed(dim_mul(c, nq, dv.value)) : Dim{};
    y = {(*q)[0], sq, hidden};
  } else {
    return;
  }
  c.set_shape(0, y);
  if (auto past = c.in_shape(4); past && past->size() == 4)
    skv = (*past)[2].is_fixed() && skv.is_fixed() ? Dim::fixed(dim_add(c, (*past)[2].value, skv.value))
                                                  : Dim{};
  Dim b = (*q)[0];
  c.set_shape(1, {b, hk, skv, dq});
  c.set_shape(2, {b, hk, skv, dv});
  c.set_shape(3, {b, hq, sq, skv});
}

// Resize (and Upsample): X's rank; a resized axis' size from constant sizes, or floor(scale *
// in) from constant scales (the input's own dim where the scale is 1), else unknown.
void resize(Ctx& c) {
  auto s = c.in_shape(0);
  if (!s) return;
  SymShape r = *s;
  std::vector<int64_t> axes =
      checked_axes(c, "attribute 'axes'", c.node.attr_ints("axes"), s->size());
  if (axes.empty())
    for (size_t a = 0; a < s->size(); ++a) axes.push_back(static_cast<int64_t>(a));
  for (int64_t a : axes) r[a] = Dim{};
  const bool legacy = c.node.num_inputs() == 2;  // Resize-10, Upsample-9: (X, scales)
  const Value* sv = c.node.has_input(legacy ? 1 : 2) ? c.node.inputs[legacy ? 1 : 2] : nullptr;
  const Tensor* st = sv ? c.graph.initializer(sv) : nullptr;
  std::optional<std::vector<int64_t>> sizes;
  if (!legacy && c.node.has_input(3)) sizes = c.values_in(3);
  bool stretch = c.node.attr_string("keep_aspect_ratio_policy", "stretch") == "stretch";
  if (sizes && !sizes->empty() && sizes->size() == axes.size() && stretch) {
    for (size_t i = 0; i < axes.size(); ++i) r[axes[i]] = Dim::fixed((*sizes)[i]);
  } else if (st && st->numel() == static_cast<int64_t>(axes.size()) && st->numel() > 0) {
    auto sc = st->to_double_vector();
    for (size_t i = 0; i < axes.size(); ++i) {
      const Dim& in = (*s)[axes[i]];
      if (sc[i] == 1.0)
        r[axes[i]] = in;
      else if (const double n = (std::abs(sc[i]) <= double(std::numeric_limits<float>::max())
                                     ? double(static_cast<float>(sc[i]))  // as the kernel rounds it
                                     : sc[i]) *
                                double(in.value);
               in.is_fixed() && n >= 0 && n < double(int64_t{1} << 62))  // NaN, 1e30: unknown
        r[axes[i]] = Dim::fixed(static_cast<int64_t>(n));
    }
  }
  c.set_shape(0, r);
}

// GridSample: [N, C] of X, then the grid's spatial dims.
void grid_sample(Ctx& c) {
  auto x = c.in_shape(0), grid = c.in_shape(1);
  if (!x || !grid || x->size() < 3 || grid->size() != x->size()) return;
  SymShape r = {(*x)[0], (*x)[1]};
  r.insert(r.end(), grid->begin() + 1, grid->end() - 1);
  c.set_shape(0, r);
}

// Spatial output sizes of a Conv, ConvTranspose or windowed pool when X's spatial sizes, the
// kernel and the attributes are static: the same arithmetic as the CPU kernels' geometry
// (the CPU provider's conv_ref.cpp and pool.cpp). The gradient rules then write static pads and
// crops instead of computing them at run time (and ConvTranspose gradients no longer transpose
// past X's extent). Sizes stay unknown when anything is dynamic or inconsistent; the kernel reports
// those at run time.
std::optional<std::vector<int64_t>> window_spatial(const Ctx& c, const SymShape& x) {
  const Node& n = c.node;
  const std::string& op = n.op_type;
  const bool conv = op == "Conv", transpose = op == "ConvTranspose";
  const size_t nsp = x.size() - 2;
  std::vector<int64_t> in, k;
  for (size_t i = 2; i < x.size(); ++i) {
    if (!x[i].is_fixed()) return std::nullopt;
    in.push_back(x[i].value);
  }
  if (n.has_attr("kernel_shape")) {
    k = n.attr_ints("kernel_shape");
  } else if (conv || transpose) {
    auto w = c.in_shape(1);
    if (!w || w->size() != x.size()) return std::nullopt;
    for (size_t i = 2; i < w->size(); ++i) {
      if (!(*w)[i].is_fixed()) return std::nullopt;
      k.push_back((*w)[i].value);
    }
  }
  const std::vector<int64_t> ones(nsp, 1);
  std::vector<int64_t> s = n.attr_ints("strides", ones), d = n.attr_ints("dilations", ones),
                       pads = n.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  if (k.size() != nsp || s.size() != nsp || d.size() != nsp || pads.size() != 2 * nsp)
    return std::nullopt;
  for (size_t i = 0; i < nsp; ++i)
    if (k[i] < 1 || s[i] < 1 || d[i] < 1) return std::nullopt;
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const bool valid = auto_pad == "VALID";
  std::vector<int64_t> out(nsp);
  if (transpose) {
    std::vector<int64_t> opad = n.attr_ints("output_padding", std::vector<int64_t>(nsp, 0)),
                         oshape = n.attr_ints("output_shape");
    if (oshape.size() == nsp + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
    if (opad.size() != nsp || (!oshape.empty() && oshape.size() != nsp)) return std::nullopt;
    for (size_t i = 0; i < nsp; ++i) {
      using I = __int128;  // attribute values are arbitrary int64s
      const I full = I{s[i]} * (in[i] - 1) + opad[i] + I{k[i] - 1} * d[i] + 1;
      if (!oshape.empty())
        out[i] = oshape[i];
      else if (n.has_attr("pads") && !valid)
        out[i] = dim_narrow(c, full - pads[i] - pads[i + nsp]);
      else
        out[i] = dim_narrow(c, same ? I{in[i]} * s[i] : full);
    }
  } else {
    const bool ceil_mode = !conv && n.attr_int("ceil_mode", 0) != 0;
    for (size_t i = 0; i < nsp; ++i) {
      using I = __int128;  // attribute values are arbitrary int64s
      if (same) {
        out[i] = dim_narrow(c, (I{in[i]} + s[i] - 1) / s[i]);
        continue;
      }
      const I pl = valid ? 0 : pads[i], pr = valid ? 0 : pads[i + nsp];
      const I span = I{in[i]} + pl + pr - (I{k[i] - 1} * d[i] + 1);
      if (span < 0) return std::nullopt;
      I o = (ceil_mode ? (span + s[i] - 1) / s[i] : span / s[i]) + 1;
      // The last window must start inside the input or the left padding.
      if (ceil_mode && (o - 1) * s[i] >= in[i] + pl) --o;
      out[i] = dim_narrow(c, o);
    }
  }
  for (int64_t o : out)
    if (o < 1) return std::nullopt;
  return out;
}

// Conv, ConvTranspose and the windowed pools: X's rank, the batch, the channels (W's for a
// convolution) and, when static, the spatial sizes. The global pools give [N, C, 1, ...].
void windowed(Ctx& c) {
  auto x = c.in_shape(0);
  if (!x || x->size() < 3) return;
  const std::string& op = c.node.op_type;
  SymShape r(x->size(), Dim{});
  r[0] = (*x)[0];
  if (op == "Conv" || op == "ConvTranspose") {
    auto w = c.in_shape(1);
    if (w && w->size() == x->size()) {
      const Dim& ch = (*w)[op == "Conv" ? 0 : 1];
      int64_t group = c.node.attr_int("group", 1);
      r[1] = op == "Conv" ? ch : ch.is_fixed() ? Dim::fixed(dim_mul(c, ch.value, group)) : Dim{};
    }
  } else {
    r[1] = (*x)[1];
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "GlobalLpPool") {
    for (size_t i = 2; i < r.size(); ++i) r[i] = Dim::fixed(1);
  } else if (auto sp = window_spatial(c, *x)) {
    for (size_t i = 0; i < sp->size(); ++i) r[i + 2] = Dim::fixed((*sp)[i]);
  }
  c.set_shape(0, r);
  if (op == "MaxPool") c.set_shape(1, r);
}

void constant_of_shape(Ctx& c) {
  DataType dt = DataType::Float;
  if (const Attribute* a = c.node.attr("value"); a && a->type == Attribute::Type::Tensor) dt = a->t.dtype();
  c.out[0] = ValueType::tensor(dt);
  if (auto shape = c.ints_in(0); shape && !shape->scalar) {
    SymShape r;
    for (const auto& x : shape->v) r.push_back(x.dim());
    c.out[0].shape = r;
  } else if (auto n = c.length_of(0)) {
    c.out[0].shape = unknown_dims(*n);
  }
}

/// The type both `a` and `b` fit: dims they disagree on become unknown, ranks they disagree on
/// an unknown shape.
ValueType merge_types(const ValueType& a, const ValueType& b) {
  if (!a.is_tensor() || !b.is_tensor()) return a.kind != ValueType::Kind::Unknown ? a : b;
  ValueType r = ValueType::tensor(a.elem != DataType::Undefined ? a.elem : b.elem);
  if (a.shape && b.shape && a.shape->size() == b.shape->size()) {
    r.shape = *a.shape;
    for (size_t i = 0; i < r.shape->size(); ++i)
      if (!((*a.shape)[i] == (*b.shape)[i])) (*r.shape)[i] = Dim{};
  }
  return r;
}

const Graph* graph_attr(const Node& n, const char* name) {
  const Attribute* a = n.attr(name);
  return a && a->g ? a->g.get() : nullptr;
}

// If: each output as both branches type it.
void if_op(Ctx& c) {
  const Graph *t = graph_attr(c.node, "then_branch"), *e = graph_attr(c.node, "else_branch");
  if (!t || !e) return;
  for (size_t o = 0; o < c.out.size() && o < t->outputs.size() && o < e->outputs.size(); ++o)
    c.out[o] = merge_types(t->outputs[o]->type, e->outputs[o]->type);
}

// Loop: carried values as the body returns them (merged with their initial value), scan
// outputs stacked along a new leading axis of run-time length.
void loop_op(Ctx& c) {
  const Graph* body = graph_attr(c.node, "body");
  if (!body) return;
  size_t n = static_cast<size_t>(std::max(0, c.node.num_inputs() - 2));
  for (size_t o = 0; o < c.out.size() && 1 + o < body->outputs.size(); ++o) {
    const ValueType& t = body->outputs[1 + o]->type;
    if (o < n) {
      const ValueType* init = c.in(static_cast<int>(2 + o));
      c.out[o] = init && t.kind != ValueType::Kind::Unknown ? merge_types(t, *init) : t;
    } else {
      c.out[o] = t;
      if (t.is_tensor() && t.shape) c.out[o].shape->insert(c.out[o].shape->begin(), Dim{});
    }
  }
}

// RNN/GRU/LSTM: Y [S, D, B, H] (layout 1: [B, S, D, H]); Y_h, Y_c [D, B, H] ([B, D, H]).
void recurrent(Ctx& c) {
  auto x = c.in_shape(0);
  if (!x || x->size() != 3) return;
  bool layout = c.node.attr_int("layout", 0) != 0;
  Dim S = (*x)[layout ? 1 : 0], B = (*x)[layout ? 0 : 1];
  Dim D = Dim::fixed(c.node.attr_string("direction", "forward") == "bidirectional" ? 2 : 1);
  Dim H = c.node.has_attr("hidden_size") ? Dim::fixed(c.node.attr_int("hidden_size", 0)) : Dim{};
  if (auto r = c.in_shape(2); !H.is_fixed() && r && r->size() == 3) H = (*r)[2];
  c.set_shape(0, layout ? SymShape{B, S, D, H} : SymShape{S, D, B, H});
  for (int o = 1; o < 3; ++o) c.set_shape(o, layout ? SymShape{B, D, H} : SymShape{D, B, H});
}

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    // Elementwise and shape-preserving ops: output shape is input 0's.
    for (const char* op :
         {"Abs", "Neg", "Floor", "Ceil", "Round", "Sign", "Relu", "LeakyRelu", "Elu", "Selu", "Gelu",
          "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Erf", "Exp",
          "Log", "Sqrt", "Reciprocal", "Not", "Identity",
          "Dropout", "Clip", "CumSum", "LayerNormalization", "BatchNormalization",
          "InstanceNormalization", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
          "Asinh", "Acosh", "Atanh", "IsNaN", "IsInf", "Mish", "Celu", "ThresholdedRelu",
          "Shrink", "LpNormalization", "Trilu", "Bernoulli", "BitwiseNot", "GroupNormalization",
          "RMSNormalization", "MeanVarianceNormalization", "LRN", "Swish", "ReverseSequence", "RotaryEmbedding",
          // The scatters write into a copy of their data (input 0).
          "ScatterND", "ScatterElements", "Scatter"})
      t[op] = same_shape;
    for (const char* op :
         {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum", "Mean", "Equal", "Less",
          "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu",
          "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})
      t[op] = broadcast_all;
    for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"})
      t[op] = [](Ctx& c) {
        // Only a given axis: the default differs by opset (1 before 13) and the kernel owns it.
        if (auto s = c.in_shape(0); s && c.node.has_attr("axis"))
          checked_axis(c, "attribute 'axis'", c.node.attr_int("axis", -1), s->size());
        same_shape(c);
      };
    for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
      t[op] = [](Ctx& c) {
        // The loss: per position [N, d...] (the labels' shape) with reduction none, else one
        // value; SoftmaxCrossEntropyLoss's log-probabilities have the scores' shape (the
        // training graph's gradient fusions read it).
        if (c.node.attr_string("reduction", "mean") != "none") c.set_shape(0, {});
        else if (const SymShape* labels = c.in_shape(1)) c.set_shape(0, *labels);
        if (const SymShape* scores = c.in_shape(0)) c.set_shape(1, *scores);
      };
    t["MatMul"] = matmul;
    t["Einsum"] = einsum;
    t["Transpose"] = transpose;
    t["Shape"] = shape_op;
    t["Size"] = [](Ctx& c) { c.set_shape(0, {}); };
    t["Reshape"] = reshape;
    t["Gemm"] = gemm;
    t["Flatten"] = flatten;
    t["Concat"] = concat;
    t["Gather"] = gather;
    t["Unsqueeze"] = unsqueeze;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      t[op] = reduce;
    t["Constant"] = constant;
    t["Cast"] = cast;
    t["CastLike"] = cast_like;
    t["ConstantOfShape"] = constant_of_shape;
    t["Expand"] = expand;
    t["Tile"] = tile;
    t["Squeeze"] = squeeze;
    t["Slice"] = slice;
    t["Range"] = range;
    t["Split"] = split;
    t["LayerNormalization"] = layer_norm;
    t["If"] = if_op;
    t["Loop"] = loop_op;
    for (const char* op : {"RNN", "GRU", "LSTM"}) t[op] = recurrent;
    t["Attention"] = attention;
    t["Resize"] = resize;
    t["Upsample"] = resize;
    t["GridSample"] = grid_sample;
    for (const char* op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
                           "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
      t[op] = windowed;
    return t;
  }();
  return table;
}

void infer_node(const Model& model, const Graph& g, Node& node, shape_values::Known& known) {
  Ctx c{node, g, std::vector<ValueType>(node.outputs.size()), known};
  const OpSchema* s = find_schema(node.op_type, node.domain, model.opset(node.domain));
  if (s) {
    // Bind each type parameter to the first known input type; a homogeneous parameter
    // bound twice to different types is a type mismatch.
    std::unordered_map<std::string, std::pair<std::string, const Value*>> bound;
    for (int i = 0; i < node.num_inputs(); ++i) {
      const FormalParam* p = s->input_param(i);
      const Value* v = node.inputs[i];
      if (!p || !v || !fully_known(v->type)) continue;
      std::string ts = type_string(v->type);
      auto cons = s->constraints.find(p->type_str);
      if (cons == s->constraints.end()) continue;
      const auto& allowed = cons->second;
      ONYX_CHECK(std::find(allowed.begin(), allowed.end(), ts) != allowed.end(),
                 "[validate] {}: type mismatch: input {} '{}' is {}, but {}-{} accepts {} there",
                 node.label(), i, v->name, ts, node.op_type, s->since_version, fmt::join(allowed, ", "));
      auto [it, fresh] = bound.emplace(p->type_str, std::make_pair(ts, v));
      bool variadic_mixed = p->option == 'V' && !p->homogeneous;
      ONYX_CHECK(fresh || variadic_mixed || it->second.first == ts,
                 "[validate] {}: type mismatch: inputs '{}' ({}) and '{}' ({}) must have the same "
                 "type {}",
                 node.label(), it->second.second->name, it->second.first, v->name, ts, p->type_str);
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const FormalParam* p = s->output_param(static_cast<int>(o));
      if (!p) continue;
      DataType dt = DataType::Undefined;
      if (auto b = bound.find(p->type_str); b != bound.end()) {
        dt = tensor_type_of(b->second.first);
      } else if (auto cons = s->constraints.find(p->type_str); cons != s->constraints.end()) {
        if (cons->second.size() == 1) dt = tensor_type_of(cons->second[0]);
      } else {
        dt = tensor_type_of(p->type_str);
      }
      if (dt != DataType::Undefined) c.out[o] = ValueType::tensor(dt);
    }
  }
  auto r = rules().find(node.op_type);
  if (r != rules().end() && node.domain.empty()) {
    if (!c.out.empty() && c.out[0].kind == ValueType::Kind::Unknown)
      if (const ValueType* t0 = c.in(0); t0 && t0->is_tensor())
        c.out[0] = ValueType::tensor(DataType::Undefined);
    r->second(c);
  }
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    Value* v = node.outputs[o];
    if (!v) continue;
    ValueType& t = v->type;
    const ValueType& p = c.out[o];
    if (t.kind == ValueType::Kind::Unknown && p.kind != ValueType::Kind::Unknown) {
      t = p;
    } else if (t.is_tensor() && p.is_tensor()) {
      if (t.elem == DataType::Undefined) t.elem = p.elem;
      if (!t.shape && p.shape) t.shape = p.shape;
    }
  }
  shape_values::propagate(node, g, known);
}

/// Types a subgraph's reads of outer values from `outer` (the graph of the node holding it),
/// and a Loop body's inputs from the Loop's, where the model left them untyped.
void type_subgraph_inputs(const Graph& outer, const Node& n, Graph& sg) {
  for (const auto& [name, v] : sg.values()) {
    if (v->type.kind != ValueType::Kind::Unknown || v->producer || sg.initializers.count(name)) continue;
    if (std::find(sg.inputs.begin(), sg.inputs.end(), v.get()) != sg.inputs.end()) continue;
    if (const Value* o = outer.find_value(name)) v->type = o->type;
  }
  if (n.op_type != "Loop" || !n.domain.empty()) return;
  for (size_t i = 0; i < sg.inputs.size(); ++i) {
    ValueType& t = sg.inputs[i]->type;
    if (t.kind != ValueType::Kind::Unknown) continue;
    if (i == 0) t = ValueType::tensor(DataType::Int64, SymShape{});
    else if (i == 1) t = ValueType::tensor(DataType::Bool, SymShape{});
    else if (n.has_input(static_cast<int>(i))) t = n.inputs[i]->type;
  }
}

void infer_graph(const Model& model, Graph& g, shape_values::Known& known) {
  for (Node* n : g.topological_order()) {
    for (auto& [an, a] : n->attrs) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (auto& sg : subs) {
        type_subgraph_inputs(g, *n, *sg);
        infer_graph(model, *sg, known);
      }
    }
    infer_node(model, g, *n, known);
  }
}

}  // namespace

std::optional<SymShape> broadcast_shapes(const SymShape& a, const SymShape& b) {
  size_t n = std::max(a.size(), b.size());
  SymShape r(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim* db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da) r[i] = *db;
    else if (!db) r[i] = *da;
    else if (da->is_fixed() && db->is_fixed()) {
      if (da->value != db->value && da->value != 1 && db->value != 1) return std::nullopt;
      r[i] = Dim::fixed(da->value == 1 ? db->value : da->value);
    } else if (da->is_fixed() && da->value == 1) r[i] = *db;
    else if (db->is_fixed() && db->value == 1) r[i] = *da;
    else if (*da == *db) r[i] = *da;
    else r[i] = da->is_fixed() ? *da : db->is_fixed() ? *db : Dim{};
  }
  return r;
}

void infer_types_and_shapes(Model& model) {
  shape_values::Known known;
  infer_graph(model, *model.graph, known);
}

void infer_subgraph_types(const Model& model, Graph& g) {
  if (g.parent)
    for (const auto& [name, v] : g.values()) {
      if (v->type.kind != ValueType::Kind::Unknown || v->producer || g.initializers.count(name)) continue;
      if (std::find(g.inputs.begin(), g.inputs.end(), v.get()) != g.inputs.end()) continue;
      for (const Graph* o = g.parent; o; o = o->parent)
        if (const Value* ov = o->find_value(name); ov && ov->type.kind != ValueType::Kind::Unknown) {
          v->type = ov->type;
          break;
        }
    }
  shape_values::Known known;
  infer_graph(model, g, known);
}

}  // namespace onyx

namespace onyx {

std::optional<std::vector<int64_t>> known_int_values(const Graph& g, const Value* v) {
  if (!v) return std::nullopt;
  // The producers `v` depends on, each once, inputs before readers (a post-order walk); a
  // chain longer than a shape computation's is left unknown.
  constexpr size_t kMaxNodes = 64;
  std::vector<const Node*> order;
  std::unordered_map<const Node*, bool> seen;  // true once its inputs are ordered
  std::vector<std::pair<const Node*, size_t>> stack;
  if (v->producer) stack.emplace_back(v->producer, 0);
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next == 0 && seen.count(n)) {
      stack.pop_back();
      continue;
    }
    seen.emplace(n, false);
    // Shape and Size read only their input's type: what computes the input does not matter
    // (a Shape deep in a network would otherwise walk back through every layer before it).
    const bool reads_type_only = (n->op_type == "Shape" || n->op_type == "Size") && n->domain.empty();
    if (!reads_type_only && next < n->inputs.size()) {
      const Value* in = n->inputs[next++];
      if (in && in->producer && !seen.count(in->producer)) {
        if (seen.size() > kMaxNodes) return std::nullopt;
        stack.emplace_back(in->producer, 0);
      }
      continue;
    }
    seen[n] = true;
    order.push_back(n);
    stack.pop_back();
  }
  shape_values::Known known;
  for (const Node* n : order) shape_values::propagate(*n, g, known);
  auto ints = shape_values::lookup(known, g, v);
  return ints ? ints->values() : std::nullopt;
}

}  // namespace onyx
