// String ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch, and the
// ai.onnx.ml LabelEncoder (a key -> value lookup, usually over strings).
#include <cmath>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cpu_kernels.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

const Tensor& string_input(KernelContext& ctx, int i) {
  const Tensor& t = ctx.required_input(i);
  ONYX_CHECK(t.dtype() == DataType::String, "[{}] input {} must be string, got {}", ctx.label(), i,
             dtype_name(t.dtype()));
  return t;
}

// Case mapping is ASCII only (locale-specific and accent rules are not applied).
std::string change_case(std::string s, int action) {
  for (char& c : s) {
    if (action == 1 && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (action == 2 && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

class StringNormalizerKernel final : public Kernel {
 public:
  explicit StringNormalizerKernel(const KernelInfo& info) {
    const Node& n = info.node;
    std::string action = n.attr_string("case_change_action", "NONE");
    if (action == "LOWER") {
      action_ = 1;
    } else if (action == "UPPER") {
      action_ = 2;
    } else {
      ONYX_CHECK(action == "NONE", "[{}] case_change_action must be NONE, LOWER or UPPER, got '{}'",
                 n.label(), action);
    }
    case_sensitive_ = n.attr_int("is_case_sensitive", 0) != 0;
    for (const std::string& w : n.attr_strings("stopwords"))
      stops_.insert(case_sensitive_ ? w : change_case(w, 1));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = string_input(ctx, 0);
    const Shape& s = x.shape();
    ONYX_CHECK(s.size() == 1 || (s.size() == 2 && s[0] == 1),
               "[{}] input must have shape [C] or [1, C], got {}", ctx.label(), shape_str(s));
    const std::string* in = x.data<std::string>();
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::string w = remove_stopwords(in[i]);
      w = change_case(std::move(w), action_);
      if (!w.empty()) kept.push_back(std::move(w));
    }
    if (kept.empty()) kept.emplace_back();
    Shape out = s;
    out.back() = static_cast<int64_t>(kept.size());
    std::string* y = ctx.allocate_output(0, DataType::String, out).data<std::string>();
    std::move(kept.begin(), kept.end(), y);
  }

 private:
  // Drops stopwords among the space-separated words of `text`.
  std::string remove_stopwords(const std::string& text) const {
    if (stops_.empty()) return text;
    std::string out;
    bool first = true;
    size_t b = 0;
    while (true) {
      size_t e = text.find(' ', b);
      std::string word = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
      if (!stops_.count(case_sensitive_ ? word : change_case(word, 1))) {
        if (!first) out += ' ';
        out += word;
        first = false;
      }
      if (e == std::string::npos) break;
      b = e + 1;
    }
    return out;
  }

  int action_ = 0;  // 0 none, 1 lower, 2 upper
  bool case_sensitive_ = false;
  std::unordered_set<std::string> stops_;
};

bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

// Python's str.split(sep, maxsplit): an empty `sep` splits on whitespace runs.
std::vector<std::string> py_split(const std::string& s, const std::string& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep.empty()) {
    size_t i = 0, n = s.size();
    while (true) {
      while (i < n && is_space(s[i])) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t b = 0;
  while (true) {
    size_t e = s.find(sep, b);
    if (e == std::string::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(s.substr(b));
      break;
    }
    parts.push_back(s.substr(b, e - b));
    b = e + sep.size();
  }
  return parts;
}

class StringSplitKernel final : public Kernel {
 public:
  explicit StringSplitKernel(const KernelInfo& info)
      : delimiter_(info.node.attr_string("delimiter", "")),
        maxsplit_(info.node.attr_int("maxsplit", -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = string_input(ctx, 0);
    const std::string* in = x.data<std::string>();
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
    int64_t width = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      parts[i] = py_split(in[i], delimiter_, maxsplit_);
      width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
    }
    Shape ys = x.shape();
    ys.push_back(width);
    Tensor& y = ctx.allocate_output(0, DataType::String, ys);
    std::string* out = y.data<std::string>();
    for (int64_t i = 0; i < y.numel(); ++i) out[i].clear();
    int64_t* len = ctx.allocate_output(1, DataType::Int64, x.shape()).data<int64_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      len[i] = static_cast<int64_t>(parts[i].size());
      std::move(parts[i].begin(), parts[i].end(), out + i * width);
    }
  }

 private:
  std::string delimiter_;
  int64_t maxsplit_;
};

void string_concat(KernelContext& ctx) {
  const Tensor& a = string_input(ctx, 0);
  const Tensor& b = string_input(ctx, 1);
  Shape out = broadcast_shapes(ctx.label(), {a.shape(), b.shape()});
  std::string* y = ctx.allocate_output(0, DataType::String, out).data<std::string>();
  const std::string* pa = a.data<std::string>();
  const std::string* pb = b.data<std::string>();
  BroadcastPlan p(out, {a.shape(), b.shape()});
  broadcast_for<2>(p, ctx.threads(), 4096, [&](int64_t o, const auto& in, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      y[o + i] = pa[in[0] + i * p.step[0]] + pb[in[1] + i * p.step[1]];
  });
}

// std::regex (ECMAScript) stands in for RE2: RE2-only syntax such as (?P<name>..) or \pL
// is rejected at session creation; a leading (?i) is honoured.
class RegexFullMatchKernel final : public Kernel {
 public:
  explicit RegexFullMatchKernel(const KernelInfo& info) {
    std::string pattern = info.node.require_attr("pattern", Attribute::Type::String).s;
    auto flags = std::regex::ECMAScript;
    if (pattern.rfind("(?i)", 0) == 0) {
      pattern = pattern.substr(4);
      flags |= std::regex::icase;
    }
    try {
      re_ = std::regex(pattern, flags);
    } catch (const std::regex_error& e) {
      ONYX_THROW("[{}] pattern '{}' is not a regular expression this runtime supports: {}",
                 info.label(), pattern, e.what());
    }
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = string_input(ctx, 0);
    const std::string* in = x.data<std::string>();
    bool* y = ctx.allocate_output(0, DataType::Bool, x.shape()).data<bool>();
    for (int64_t i = 0; i < x.numel(); ++i) y[i] = std::regex_match(in[i], re_);
  }

 private:
  std::regex re_;
};

// LabelEncoder: keys and values come from keys_*/values_* attributes (or *_tensor).
Tensor attr_as_tensor(const Node& n, const std::string& prefix) {
  if (const Attribute* a = n.attr(prefix + "tensor")) return a->t;
  if (const Attribute* a = n.attr(prefix + "strings"))
    return Tensor::from_vector<std::string>({static_cast<int64_t>(a->strings.size())}, a->strings);
  if (const Attribute* a = n.attr(prefix + "int64s"))
    return Tensor::from_vector<int64_t>({static_cast<int64_t>(a->ints.size())}, a->ints);
  if (const Attribute* a = n.attr(prefix + "floats"))
    return Tensor::from_vector<float>({static_cast<int64_t>(a->floats.size())}, a->floats);
  ONYX_THROW("[{}] needs one of {}strings, {}int64s, {}floats or {}tensor", n.label(), prefix,
             prefix, prefix, prefix);
}

Tensor label_default(const Node& n, DataType values) {
  if (const Attribute* a = n.attr("default_tensor")) {
    ONYX_CHECK(a->t.numel() == 1 && a->t.dtype() == values,
               "[{}] default_tensor must be one {} value, got {} {}", n.label(), dtype_name(values),
               dtype_name(a->t.dtype()), shape_str(a->t.shape()));
    return a->t;
  }
  if (values == DataType::String)
    return Tensor::scalar<std::string>(n.attr_string("default_string", "_Unused"));
  if (values == DataType::Int64) return Tensor::scalar<int64_t>(n.attr_int("default_int64", -1));
  if (values == DataType::Float) return Tensor::scalar<float>(n.attr_float("default_float", -0.0f));
  if (is_float(values)) return Tensor::scalar<double>(-0.0);
  return Tensor::scalar<int64_t>(-1);
}

using LabelTypes = TypeList<std::string, int64_t, int32_t, int16_t, float, double>;

class LabelEncoderKernel final : public Kernel {
 public:
  explicit LabelEncoderKernel(const KernelInfo& info) {
    const Node& n = info.node;
    Tensor keys = attr_as_tensor(n, "keys_"), values = attr_as_tensor(n, "values_");
    ONYX_CHECK(keys.numel() == values.numel(), "[{}] has {} keys but {} values", n.label(),
               keys.numel(), values.numel());
    Tensor def = label_default(n, values.dtype());
    dispatch<LabelTypes>(keys.dtype(), n.label(), [&]<typename K>() {
      dispatch<LabelTypes>(values.dtype(), n.label(), [&]<typename V>() {
        impl_ = std::make_unique<Map<K, V>>(keys, values, def);
      });
    });
    key_type_ = keys.dtype();
    value_type_ = values.dtype();
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.dtype() == key_type_, "[{}] input must be {} like the keys, got {}", ctx.label(),
               dtype_name(key_type_), dtype_name(x.dtype()));
    impl_->apply(x, ctx.allocate_output(0, value_type_, x.shape()));
  }

 private:
  struct MapBase {
    virtual ~MapBase() = default;
    virtual void apply(const Tensor& x, Tensor& y) const = 0;
  };
  template <typename K, typename V>
  struct Map final : MapBase {
    Map(const Tensor& keys, const Tensor& values, const Tensor& def) {
      const K* k = keys.data<K>();
      const V* v = values.data<V>();
      for (int64_t i = 0; i < keys.numel(); ++i) {
        if constexpr (std::is_floating_point_v<K>) {
          if (std::isnan(k[i])) {
            nan_value = v[i];
            continue;
          }
        }
        table.emplace(k[i], v[i]);
      }
      if constexpr (std::is_same_v<V, std::string>) {
        fallback = def.data<std::string>()[0];
      } else {
        fallback = static_cast<V>(def.to_double_vector()[0]);
        if (def.dtype() == DataType::Int64) fallback = static_cast<V>(def.data<int64_t>()[0]);
      }
    }
    void apply(const Tensor& x, Tensor& y) const override {
      const K* in = x.data<K>();
      V* out = y.data<V>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if constexpr (std::is_floating_point_v<K>) {
          if (std::isnan(in[i])) {
            out[i] = nan_value ? *nan_value : fallback;
            continue;
          }
        }
        auto it = table.find(in[i]);
        out[i] = it == table.end() ? fallback : it->second;
      }
    }
    std::unordered_map<K, V> table;
    std::optional<V> nan_value;
    V fallback{};
  };

  std::unique_ptr<MapBase> impl_;
  DataType key_type_ = DataType::Undefined, value_type_ = DataType::Undefined;
};

}  // namespace

void register_string_kernels(KernelRegistry& r) {
  const std::vector<DataType> strings{DataType::String};
  r.add({.op_type = "StringNormalizer",
         .since = 10,
         .types = strings,
         .create = make_factory<StringNormalizerKernel>()});
  r.add({.op_type = "StringSplit",
         .since = 20,
         .types = strings,
         .create = make_factory<StringSplitKernel>()});
  r.add({.op_type = "StringConcat",
         .since = 20,
         .types = strings,
         .create = function_factory(string_concat)});
  r.add({.op_type = "RegexFullMatch",
         .since = 20,
         .types = strings,
         .create = make_factory<RegexFullMatchKernel>()});
  r.add({.op_type = "LabelEncoder",
         .domain = "ai.onnx.ml",
         .since = 1,
         .types = {DataType::String, DataType::Int64, DataType::Int32, DataType::Int16,
                   DataType::Float, DataType::Double},
         .create = make_factory<LabelEncoderKernel>()});
}

}  // namespace onyx::cpu
