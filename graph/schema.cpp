#include "graph/schema.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "graph/ir.h"

namespace onyx {
namespace {

struct RawSchema {
  const char *name, *domain;
  int since;
  bool deprecated;
  int min_in, max_in, min_out, max_out;
  const char *inputs, *outputs, *constraints;
};

constexpr RawSchema kRaw[] = {
#include "graph/onnx_schemas.inc"
};

/// Types onyx accepts beyond ONNX's constraint (op, domain, constraint, type). `onyx gradcheck`
/// converts a model to float64 (graph/float64.h); an op whose ONNX constraint stops at float32
/// would make every model using it uncheckable, so its kernel also runs in double.
struct TypeExtension {
  const char *op, *domain, *constraint, *type;
};
constexpr TypeExtension kExtensions[] = {
    {"RotaryEmbedding", "", "T", "tensor(double)"},
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

std::vector<FormalParam> parse_params(const std::string& s) {
  // "S:T,O:tensor(int64),V!:T" ; type strings contain no ',' except inside "map(a, b)"
  std::vector<FormalParam> out;
  size_t pos = 0;
  while (pos < s.size()) {
    FormalParam p;
    p.option = s[pos++];
    if (s[pos] == '!') {
      p.homogeneous = false;
      ++pos;
    }
    ++pos;  // ':'
    int depth = 0;
    size_t start = pos;
    while (pos < s.size() && !(s[pos] == ',' && depth == 0)) {
      if (s[pos] == '(') ++depth;
      if (s[pos] == ')') --depth;
      ++pos;
    }
    p.type_str = s.substr(start, pos - start);
    ++pos;
    out.push_back(std::move(p));
  }
  return out;
}

struct Table {
  // key: domain + '\n' + op -> versions ascending
  std::unordered_map<std::string, std::vector<OpSchema>> by_op;
  std::unordered_map<std::string, bool> domains;
  Table() {
    for (const auto& r : kRaw) {
      OpSchema s;
      s.name = r.name;
      s.domain = canonical_domain(r.domain);
      s.since_version = r.since;
      s.deprecated = r.deprecated;
      s.min_inputs = r.min_in;
      s.max_inputs = r.max_in;
      s.min_outputs = r.min_out;
      s.max_outputs = r.max_out;
      s.inputs = parse_params(r.inputs);
      s.outputs = parse_params(r.outputs);
      for (const auto& c : split(r.constraints, ';')) {
        auto eq = c.find('=');
        s.constraints[c.substr(0, eq)] = split(c.substr(eq + 1), '|');
      }
      domains[s.domain] = true;
      by_op[s.domain + '\n' + s.name].push_back(std::move(s));
    }
    for (const auto& e : kExtensions)
      for (OpSchema& s : by_op[canonical_domain(e.domain) + '\n' + e.op]) {
        auto& allowed = s.constraints[e.constraint];
        if (std::find(allowed.begin(), allowed.end(), e.type) == allowed.end())
          allowed.push_back(e.type);
      }
    // bfloat16 wherever float16 is accepted: autocast (graph/autocast.h) runs models of any
    // opset in bfloat16, and ONNX added bfloat16 to most ops in later versions without
    // changing their meaning (Conv and ConvTranspose only in opset 22); onyx's kernels take
    // bfloat16 wherever they take float16.
    for (auto& [key, versions] : by_op)
      for (OpSchema& s : versions)
        for (auto& [name, allowed] : s.constraints)
          if (std::find(allowed.begin(), allowed.end(), "tensor(float16)") != allowed.end() &&
              std::find(allowed.begin(), allowed.end(), "tensor(bfloat16)") == allowed.end())
            allowed.push_back("tensor(bfloat16)");
  }
};

const Table& table() {
  static const Table t;
  return t;
}

const FormalParam* param_at(const std::vector<FormalParam>& ps, int i) {
  if (ps.empty() || i < 0) return nullptr;
  if (static_cast<size_t>(i) < ps.size()) return &ps[i];
  return ps.back().option == 'V' ? &ps.back() : nullptr;
}

}  // namespace

const FormalParam* OpSchema::input_param(int i) const { return param_at(inputs, i); }
const FormalParam* OpSchema::output_param(int i) const { return param_at(outputs, i); }

const OpSchema* find_schema(const std::string& op, const std::string& domain, int64_t opset) {
  auto it = table().by_op.find(canonical_domain(domain) + '\n' + op);
  if (it == table().by_op.end()) return nullptr;
  const OpSchema* best = nullptr;
  for (const auto& s : it->second)
    if (s.since_version <= opset) best = &s;
  return best;
}

bool schema_domain_known(const std::string& domain) {
  return table().domains.count(canonical_domain(domain)) != 0;
}

int first_opset_of(const std::string& op, const std::string& domain) {
  auto it = table().by_op.find(canonical_domain(domain) + '\n' + op);
  return it == table().by_op.end() ? 0 : it->second.front().since_version;
}

std::vector<int> schema_versions(const std::string& op, const std::string& domain) {
  std::vector<int> out;
  auto it = table().by_op.find(canonical_domain(domain) + '\n' + op);
  if (it != table().by_op.end())
    for (const auto& s : it->second) out.push_back(s.since_version);
  return out;
}

}  // namespace onyx
