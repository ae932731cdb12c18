// onyx ops: the support matrix (inference/op_support.h) as a table or JSON.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "inference/op_support.h"
#include "launcher/commands.h"

namespace onyx::cli {
namespace {

struct OpsOptions {
  std::string provider, domain;
  bool gradients = false, json = false;
};

nlohmann::ordered_json to_json(const OpSupport& r) {
  using json = nlohmann::ordered_json;  // keys in the documented order
  json opsets = json::array();
  for (const OpsetRange& o : r.opsets)
    opsets.push_back({{"since", o.since}, {"until", o.until == INT_MAX ? json(nullptr) : json(o.until)}});
  json dtypes = json::array();
  if (r.any_dtype) dtypes.push_back("any");
  for (DataType t : r.dtypes) dtypes.push_back(dtype_name(t));
  return {{"domain", domain_display_name(r.domain)},
          {"op", r.op_type},
          {"opsets", opsets},
          {"providers", r.providers},
          {"dtypes", dtypes},
          {"gradient", r.gradient}};
}

void print_table(const std::vector<OpSupport>& rows) {
  const std::vector<std::string> header = {"DOMAIN", "OP", "OPSETS", "PROVIDERS", "GRADIENT", "DTYPES"};
  std::vector<std::vector<std::string>> cells;
  for (const OpSupport& r : rows)
    cells.push_back({domain_display_name(r.domain), r.op_type, opsets_str(r.opsets),
                     r.providers.empty() ? "-" : fmt::format("{}", fmt::join(r.providers, ",")),
                     r.gradient ? "yes" : "no", dtypes_str(r)});
  std::vector<size_t> w(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& row : cells) w[c] = std::max(w[c], row[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c + 1 < row.size(); ++c) line += fmt::format("{:<{}}  ", row[c], w[c]);
    fmt::print("{}{}\n", line, row.back());  // the last column is not padded
  };
  print_row(header);
  for (const auto& row : cells) print_row(row);
  auto with_rule = std::count_if(rows.begin(), rows.end(), [](const OpSupport& r) { return r.gradient; });
  fmt::print("{} op types, {} with a gradient rule\n", rows.size(), with_rule);
}

int ops(const OpsOptions& o) {
  std::vector<OpSupport> rows = op_support(o.provider);
  if (o.gradients) std::erase_if(rows, [](const OpSupport& r) { return !r.gradient; });
  if (!o.domain.empty()) {
    std::string d = canonical_domain(o.domain);
    std::erase_if(rows, [&](const OpSupport& r) { return r.domain != d; });
  }
  if (o.json) {
    // One object per line: greppable, and still one JSON array.
    std::vector<std::string> lines;
    for (const OpSupport& r : rows) lines.push_back(to_json(r).dump());
    fmt::print("[{}{}\n]\n", lines.empty() ? "" : "\n", fmt::join(lines, ",\n"));
  } else {
    print_table(rows);
  }
  return 0;
}

}  // namespace

Command add_ops_command(CLI::App& parent, const CommonOptions&) {
  auto o = std::make_shared<OpsOptions>();
  CLI::App* app = parent.add_subcommand(
      "ops", "List the supported op types: domain, opsets, providers, dtypes, gradient rule");
  app->add_option("--provider", o->provider, "only ops with a kernel on this provider (e.g. cpu)");
  app->add_option("--domain", o->domain, "only ops of this domain (ai.onnx, com.microsoft, ...)");
  app->add_flag("--gradients", o->gradients, "only ops with a gradient rule (trainable)");
  app->add_flag("--json", o->json, "a JSON array, one object per op type");
  return {app, [o] { return ops(*o); }};
}

}  // namespace onyx::cli
