#include "inference/op_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"
#include "kernels/provider.h"

namespace onyx {
namespace {

int dtype_rank(DataType t) {
  static const DataType order[] = {
      DataType::Float,        DataType::Double,         DataType::Float16,    DataType::BFloat16,
      DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ, DataType::Float8E5M2, DataType::Float8E5M2FNUZ,
      DataType::Float8E8M0,   DataType::Float4E2M1,     DataType::Int8,       DataType::Int16,
      DataType::Int32,        DataType::Int64,          DataType::Int4,       DataType::Int2,
      DataType::UInt8,        DataType::UInt16,         DataType::UInt32,     DataType::UInt64,
      DataType::UInt4,        DataType::UInt2,          DataType::Bool,       DataType::String,
      DataType::Complex64,    DataType::Complex128};
  const auto* it = std::find(std::begin(order), std::end(order), t);
  // A dtype missing from the list still sorts, after the known ones, by its ONNX number.
  return it != std::end(order) ? static_cast<int>(it - std::begin(order))
                               : static_cast<int>(std::size(order)) + static_cast<int>(t);
}

/// Sorts ranges and joins those that overlap or touch (1-12 and 13+ make 1+).
std::vector<OpsetRange> merge(std::vector<OpsetRange> r) {
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.since < b.since; });
  std::vector<OpsetRange> out;
  for (const OpsetRange& x : r) {
    if (!out.empty() && (out.back().until == INT_MAX || x.since <= out.back().until + 1))
      out.back().until = std::max(out.back().until, x.until);
    else
      out.push_back(x);
  }
  return out;
}

}  // namespace

bool dtype_order(DataType a, DataType b) { return dtype_rank(a) < dtype_rank(b); }

std::vector<OpSupport> build_op_support(const std::vector<const KernelRegistry*>& registries,
                                        const std::vector<std::string>& gradient_op_types) {
  struct Acc {
    std::vector<OpsetRange> opsets;
    std::vector<std::string> providers;
    std::set<DataType> dtypes;
    bool any_dtype = false, gradient = false;
  };
  std::map<std::pair<std::string, std::string>, Acc> rows;  // (domain, op type)
  for (const KernelRegistry* reg : registries) {
    for (const KernelDef& d : reg->defs()) {
      Acc& a = rows[{canonical_domain(d.domain), d.op_type}];
      a.opsets.push_back({d.since, d.until});
      if (std::find(a.providers.begin(), a.providers.end(), d.provider) == a.providers.end())
        a.providers.push_back(d.provider);
      if (d.type_input < 0 || d.types.empty()) a.any_dtype = true;
      a.dtypes.insert(d.types.begin(), d.types.end());
    }
  }
  // autodiff differentiates ai.onnx nodes only (training_graph.cpp), so a rule keys ("", op).
  for (const std::string& op : gradient_op_types) rows[{"", op}].gradient = true;

  std::vector<OpSupport> out;
  for (auto& [key, a] : rows) {
    OpSupport s{key.first,   key.second, merge(std::move(a.opsets)), std::move(a.providers), {},
                a.any_dtype, a.gradient};
    if (!s.any_dtype) {
      s.dtypes.assign(a.dtypes.begin(), a.dtypes.end());
      std::sort(s.dtypes.begin(), s.dtypes.end(), dtype_order);
    }
    out.push_back(std::move(s));
  }
  // ai.onnx first (its "" already sorts first in the map), then by domain and op type.
  return out;
}

std::vector<OpSupport> op_support(const std::string& provider) {
  std::vector<const KernelRegistry*> registries;
  const std::vector<std::string> names = built_provider_names();
  for (const std::string& p : names)
    if (provider.empty() || p == provider) registries.push_back(&provider_registry(p));
  ONYX_CHECK(registries.size() > 0, "[ops] unknown provider '{}' (this build has: {})", provider,
             fmt::join(names, ", "));
  std::vector<OpSupport> rows = build_op_support(registries, autodiff::gradient_rules().op_types());
  for (OpSupport& r : rows)
    for (const auto& [domain, op] : autodiff::rewritten_op_types())
      if (r.domain == domain && r.op_type == op) r.gradient = true;
  if (!provider.empty())
    std::erase_if(rows, [&](const OpSupport& r) {
      return std::find(r.providers.begin(), r.providers.end(), provider) == r.providers.end();
    });
  return rows;
}

std::string domain_display_name(const std::string& domain) {
  std::string d = canonical_domain(domain);
  return d.empty() ? "ai.onnx" : d;
}

std::string opsets_str(const std::vector<OpsetRange>& opsets) {
  if (opsets.empty()) return "-";
  std::vector<std::string> parts;
  for (const OpsetRange& r : opsets)
    parts.push_back(r.until == INT_MAX   ? fmt::format("{}+", r.since)
                    : r.since == r.until ? fmt::format("{}", r.since)
                                         : fmt::format("{}-{}", r.since, r.until));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string dtypes_str(const OpSupport& row) {
  if (row.any_dtype) return "any";
  if (row.dtypes.empty()) return "-";
  std::vector<std::string> names;
  for (DataType t : row.dtypes) names.push_back(dtype_name(t));
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace onyx
