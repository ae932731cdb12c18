#include "graph/shape_values.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace onyx::shape_values {

ScaledSymbol split_symbol(const std::string& param) {
  const size_t star = param.find('*');
  if (star == std::string::npos || star == 0) return {1, param};
  int64_t coef = 0;
  for (size_t i = 0; i < star; ++i) {
    if (param[i] < '0' || param[i] > '9' || __builtin_mul_overflow(coef, 10, &coef) ||
        __builtin_add_overflow(coef, param[i] - '0', &coef))
      return {1, param};
  }
  return coef > 0 ? ScaledSymbol{coef, param.substr(star + 1)} : ScaledSymbol{1, param};
}

std::string scaled_symbol(int64_t coef, const std::string& name) {
  return coef == 1 ? name : std::to_string(coef) + "*" + name;
}

namespace {

bool is_int(DataType dt) { return dt == DataType::Int64 || dt == DataType::Int32; }

std::optional<Ints> from_tensor(const Tensor& t) {
  if (!is_int(t.dtype()) || t.shape().size() > 1 || t.numel() > kMaxElements) return std::nullopt;
  Ints r;
  r.scalar = t.shape().empty();
  for (int64_t x : t.to_int64_vector()) r.v.push_back(SymInt::of(x));
  return r;
}

// numpy broadcasting of two element lists (a scalar or one element against n).
template <typename F>
std::optional<Ints> elementwise(const Ints& a, const Ints& b, F f) {
  size_t n = std::max(a.v.size(), b.v.size());
  if ((a.v.size() != n && a.v.size() != 1) || (b.v.size() != n && b.v.size() != 1))
    return std::nullopt;
  Ints r;
  r.scalar = a.scalar && b.scalar;
  for (size_t i = 0; i < n; ++i)
    r.v.push_back(f(a.v[a.v.size() == 1 ? 0 : i], b.v[b.v.size() == 1 ? 0 : i]));
  return r;
}

// A symbol times a positive constant, or divided by one that divides its coefficient.
SymInt scale_symbol(const std::string& op, const SymInt& sym, int64_t k) {
  if (sym.param.empty() || k <= 0) return {};
  const ScaledSymbol s = split_symbol(sym.param);
  int64_t coef = 0;
  if (op == "Mul") {
    if (__builtin_mul_overflow(s.coef, k, &coef)) return {};
  } else if (op == "Div" && s.coef % k == 0) {
    coef = s.coef / k;
  } else {
    return {};
  }
  return SymInt{std::nullopt, scaled_symbol(coef, s.name)};
}

// Integer arithmetic the way ONNX's integer kernels do it; symbols survive the identities.
SymInt arith(const std::string& op, const SymInt& a, const SymInt& b) {
  if (a.known() && b.known()) {
    const int64_t x = *a.value, y = *b.value;
    // A result past int64 is left unknown (the kernel computes it at run time) rather than
    // made up by an undefined overflow.
    int64_t r = 0;
    if (op == "Add") return __builtin_add_overflow(x, y, &r) ? SymInt{} : SymInt::of(r);
    if (op == "Sub") return __builtin_sub_overflow(x, y, &r) ? SymInt{} : SymInt::of(r);
    if (op == "Mul") return __builtin_mul_overflow(x, y, &r) ? SymInt{} : SymInt::of(r);
    if ((op == "Div" || op == "Mod") && (y == 0 || (y == -1 && x == INT64_MIN))) return {};
    if (op == "Div") return SymInt::of(x / y);
    if (op == "Max") return SymInt::of(std::max(x, y));
    if (op == "Min") return SymInt::of(std::min(x, y));
    if (op == "Equal") return SymInt::of(x == y);
    if (op == "Mod") {  // integer Mod (fmod = 0): the sign of the divisor
      int64_t m = x % y;
      return SymInt::of(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    return {};
  }
  const bool b_is = b.known(), a_is = a.known();
  if ((op == "Add" || op == "Sub") && b_is && *b.value == 0) return a;
  if (op == "Add" && a_is && *a.value == 0) return b;
  if ((op == "Mul" || op == "Div") && b_is && *b.value == 1) return a;
  if (op == "Mul" && a_is && *a.value == 1) return b;
  if (op == "Equal" && !a.param.empty() && a.param == b.param) return SymInt::of(1);
  // A symbolic dim is a size: it is never -1, so comparing it with a negative is false.
  if (op == "Equal" && ((a_is && *a.value < 0 && !b.param.empty()) ||
                        (b_is && *b.value < 0 && !a.param.empty())))
    return SymInt::of(0);
  if ((op == "Max" || op == "Min") && a == b) return a;
  if ((op == "Mul" || op == "Div") && b_is) return scale_symbol(op, a, *b.value);
  if (op == "Mul" && a_is) return scale_symbol(op, b, *a.value);
  return {};
}

using Rule = std::function<std::optional<Ints>(const Node&, const std::vector<std::optional<Ints>>&)>;

int64_t norm(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    auto pass = [](const Node&, const std::vector<std::optional<Ints>>& in) { return in[0]; };
    t["Identity"] = pass;
    t["Cast"] = [](const Node& n, const std::vector<std::optional<Ints>>& in) {
      auto to = static_cast<DataType>(n.attr_int("to", 0));
      return is_int(to) ? in[0] : std::nullopt;
    };
    t["Unsqueeze"] = [](const Node&, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r = in[0];
      if (r && r->scalar) r->scalar = false;  // [] -> [1]; higher ranks are not tracked
      else r.reset();
      return r;
    };
    t["Squeeze"] = [](const Node&, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r = in[0];
      if (r && !r->scalar && r->v.size() == 1) r->scalar = true;
      else r.reset();
      return r;
    };
    t["Concat"] = [](const Node& n, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r = Ints{};
      for (const auto& x : in) {
        if (!x || x->scalar) return std::optional<Ints>{};
        r->v.insert(r->v.end(), x->v.begin(), x->v.end());
      }
      if (static_cast<int64_t>(r->v.size()) > kMaxElements) r.reset();
      return r;
    };
    t["Gather"] = [](const Node& n, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r;
      if (in.size() < 2 || !in[0] || !in[1] || in[0]->scalar || n.attr_int("axis", 0) != 0 ||
          !in[1]->values())
        return r;
      const int64_t size = static_cast<int64_t>(in[0]->v.size());
      const std::vector<int64_t> indices = *in[1]->values();
      r = Ints{{}, in[1]->scalar};
      for (int64_t i : indices) {
        i = norm(i, size);
        if (i < 0 || i >= size) return std::optional<Ints>{};
        r->v.push_back(in[0]->v[static_cast<size_t>(i)]);
      }
      return r;
    };
    t["Slice"] = [](const Node& n, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r;
      if (in.size() < 3 || !in[0] || in[0]->scalar || !in[1] || !in[2]) return r;
      auto starts = in[1]->values(), ends = in[2]->values();
      if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return r;
      if (in.size() > 3 && (!in[3] || in[3]->values() != std::vector<int64_t>{0})) return r;
      int64_t step = 1;
      if (in.size() > 4) {
        auto s = in[4] ? in[4]->values() : std::nullopt;
        if (!s || s->size() != 1 || (*s)[0] == 0) return r;
        step = (*s)[0];
      }
      const int64_t size = static_cast<int64_t>(in[0]->v.size());
      int64_t b = norm((*starts)[0], size), e = norm((*ends)[0], size);
      r = Ints{};
      if (step > 0) {
        b = std::clamp<int64_t>(b, 0, size), e = std::clamp<int64_t>(e, 0, size);
        for (int64_t i = b; i < e; i += step) r->v.push_back(in[0]->v[static_cast<size_t>(i)]);
      } else {
        b = std::clamp<int64_t>(b, -1, size - 1), e = std::clamp<int64_t>(e, -1, size - 1);
        for (int64_t i = b; i > e; i += step) r->v.push_back(in[0]->v[static_cast<size_t>(i)]);
      }
      return r;
    };
    // Reshape of a tracked tensor to a scalar or to one dimension.
    t["Reshape"] = [](const Node&, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r;
      auto shape = in.size() == 2 && in[0] && in[1] ? in[1]->values() : std::nullopt;
      if (!shape || shape->size() > 1) return r;
      const int64_t n = static_cast<int64_t>(in[0]->v.size());
      if (shape->empty() && n == 1) r = Ints{in[0]->v, true};
      if (shape->size() == 1 && ((*shape)[0] == -1 || (*shape)[0] == n)) r = Ints{in[0]->v, false};
      return r;
    };
    t["Neg"] = [](const Node&, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r = in[0];
      if (r)
        for (SymInt& x : r->v) x = x.known() && *x.value != INT64_MIN ? SymInt::of(-*x.value) : SymInt{};
      return r;
    };
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal"}) {
      t[op] = [op = std::string(op)](const Node& n, const std::vector<std::optional<Ints>>& in) {
        if (in.size() != 2 || !in[0] || !in[1]) return std::optional<Ints>{};
        return elementwise(*in[0], *in[1],
                           [&](const SymInt& a, const SymInt& b) { return arith(op, a, b); });
      };
    }
    t["Where"] = [](const Node&, const std::vector<std::optional<Ints>>& in) {
      std::optional<Ints> r;
      if (in.size() != 3 || !in[0] || !in[1] || !in[2]) return r;
      auto ab = elementwise(*in[1], *in[2], [](const SymInt& a, const SymInt&) { return a; });
      if (!ab) return r;
      const size_t n = std::max(in[0]->v.size(), ab->v.size());
      if ((in[0]->v.size() != n && in[0]->v.size() != 1)) return r;
      r = Ints{{}, in[0]->scalar && in[1]->scalar && in[2]->scalar};
      for (size_t i = 0; i < n; ++i) {
        const SymInt& c = in[0]->v[in[0]->v.size() == 1 ? 0 : i];
        const SymInt& a = in[1]->v[in[1]->v.size() == 1 ? 0 : i];
        const SymInt& b = in[2]->v[in[2]->v.size() == 1 ? 0 : i];
        r->v.push_back(!c.known() ? (a == b ? a : SymInt{}) : *c.value ? a : b);
      }
      return r;
    };
    return t;
  }();
  return table;
}

}  // namespace

std::optional<std::vector<int64_t>> Ints::values() const {
  std::vector<int64_t> r;
  for (const SymInt& x : v) {
    if (!x.known()) return std::nullopt;
    r.push_back(*x.value);
  }
  return r;
}

std::optional<Ints> lookup(const Known& known, const Graph& g, const Value* v) {
  if (!v) return std::nullopt;
  for (const Graph* p = &g; p; p = p->parent)
    if (const Tensor* t = p->initializer(v)) return from_tensor(*t);
  auto it = known.find(v);
  if (it != known.end()) return it->second;
  return std::nullopt;
}

void propagate(const Node& node, const Graph& g, Known& known) {
  if (!node.domain.empty() || node.outputs.empty() || !node.outputs[0]) return;
  const Value* out = node.outputs[0];
  std::optional<Ints> r;
  if (node.op_type == "Constant") {
    if (const Attribute* a = node.attr("value"); a && a->type == Attribute::Type::Tensor)
      r = from_tensor(a->t);
    else if (node.has_attr("value_int"))
      r = Ints{{SymInt::of(node.attr_int("value_int", 0))}, true};
    else if (const Attribute* l = node.attr("value_ints");
             l && static_cast<int64_t>(l->ints.size()) <= kMaxElements) {
      r = Ints{};
      for (int64_t x : l->ints) r->v.push_back(SymInt::of(x));
    }
  } else if (node.op_type == "Shape" || node.op_type == "Size") {
    const Value* x = node.has_input(0) ? node.inputs[0] : nullptr;
    if (!x || !x->type.is_tensor() || !x->type.shape) return;
    const SymShape& s = *x->type.shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    if (node.op_type == "Size") {
      int64_t p = 1;
      for (const Dim& d : s) {
        if (!d.is_fixed()) return;
        p *= d.value;
      }
      r = Ints{{SymInt::of(p)}, true};
    } else {
      int64_t b = std::clamp<int64_t>(norm(node.attr_int("start", 0), rank), 0, rank);
      int64_t e = node.has_attr("end")
                      ? std::clamp<int64_t>(norm(node.attr_int("end", rank), rank), 0, rank)
                      : rank;
      r = Ints{};
      for (int64_t i = b; i < e; ++i) r->v.push_back(SymInt::of(s[static_cast<size_t>(i)]));
    }
  } else if (node.op_type == "ConstantOfShape") {
    auto shape = lookup(known, g, node.has_input(0) ? node.inputs[0] : nullptr);
    auto n = shape ? shape->values() : std::nullopt;
    const Attribute* a = node.attr("value");
    if (!n || n->size() != 1 || (*n)[0] > kMaxElements || (*n)[0] < 0) return;
    int64_t fill = 0;
    if (a && a->type == Attribute::Type::Tensor) {
      if (!is_int(a->t.dtype()) || a->t.numel() != 1) return;
      fill = a->t.to_int64_vector()[0];
    } else if (a) {
      return;
    }
    r = Ints{std::vector<SymInt>(static_cast<size_t>((*n)[0]), SymInt::of(fill)), false};
  } else {
    auto rule = rules().find(node.op_type);
    if (rule == rules().end()) return;
    std::vector<std::optional<Ints>> in;
    bool any = false;
    for (int i = 0; i < node.num_inputs(); ++i) {
      in.push_back(lookup(known, g, node.has_input(i) ? node.inputs[i] : nullptr));
      any = any || in.back().has_value();
    }
    if (!any) return;
    r = rule->second(node, in);
  }
  if (r && static_cast<int64_t>(r->v.size()) <= kMaxElements) known[out] = std::move(*r);
}

}  // namespace onyx::shape_values
