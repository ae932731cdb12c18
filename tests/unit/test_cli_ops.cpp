// The op support matrix (inference/op_support.h) checked against the registries it is built
// from, and `onyx ops` run as a process: the table, --gradients, --provider cpu --json,
// --domain, and the one-line error for an unknown provider.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "autodiff/gradient_rules.h"
#include "cli_process.h"
#include "inference/op_support.h"
#include "kernels/provider.h"

namespace onyx {
namespace {

const OpSupport* find_row(const std::vector<OpSupport>& rows, const std::string& domain,
                          const std::string& op) {
  for (const auto& r : rows)
    if (r.domain == domain && r.op_type == op) return &r;
  return nullptr;
}

bool covers(const std::vector<OpsetRange>& opsets, int v) {
  return std::any_of(opsets.begin(), opsets.end(),
                     [&](const OpsetRange& r) { return r.since <= v && v <= r.until; });
}

bool has(const std::vector<DataType>& v, DataType t) { return std::find(v.begin(), v.end(), t) != v.end(); }

bool has_provider(const OpSupport& r, const std::string& p) {
  return std::find(r.providers.begin(), r.providers.end(), p) != r.providers.end();
}

/// Rows marked trainable: the rule table plus the ops trained through a rewrite.
size_t gradient_rule_count() {
  return autodiff::gradient_rules().op_types().size() + autodiff::rewritten_op_types().size();
}

TEST(OpSupport, EveryCpuKernelAndEveryGradientRuleHasItsRow) {
  std::vector<OpSupport> rows = op_support();
  for (const KernelDef& d : cpu_kernel_registry().defs()) {
    const OpSupport* r = find_row(rows, d.domain, d.op_type);
    ASSERT_NE(r, nullptr) << d.domain << " " << d.op_type;
    EXPECT_TRUE(has_provider(*r, "cpu")) << d.op_type;
    EXPECT_TRUE(covers(r->opsets, d.since) && covers(r->opsets, d.until))
        << d.op_type << " " << opsets_str(r->opsets);
    if (d.type_input < 0 || d.types.empty()) {
      EXPECT_TRUE(r->any_dtype) << d.op_type;
      continue;
    }
    for (DataType t : d.types)
      EXPECT_TRUE(r->any_dtype || has(r->dtypes, t)) << d.op_type << " " << dtype_name(t);
  }
  for (const std::string& op : autodiff::gradient_rules().op_types()) {
    const OpSupport* r = find_row(rows, "", op);
    ASSERT_NE(r, nullptr) << op;
    EXPECT_TRUE(r->gradient) << op;
  }
  for (const auto& [domain, op] : autodiff::rewritten_op_types()) {
    const OpSupport* r = find_row(rows, domain, op);
    ASSERT_NE(r, nullptr) << op;
    EXPECT_TRUE(r->gradient) << op;
  }
  EXPECT_EQ(static_cast<size_t>(
                std::count_if(rows.begin(), rows.end(), [](const OpSupport& r) { return r.gradient; })),
            gradient_rule_count());
  // One row per (domain, op type), ai.onnx first, then by domain and op type.
  for (size_t i = 1; i < rows.size(); ++i)
    EXPECT_LT(std::tie(rows[i - 1].domain, rows[i - 1].op_type), std::tie(rows[i].domain, rows[i].op_type));
  EXPECT_EQ(rows.front().domain, "");
}

TEST(OpSupport, KnownRows) {
  std::vector<OpSupport> rows = op_support();
  const OpSupport* relu = find_row(rows, "", "Relu");
  ASSERT_NE(relu, nullptr);
  // Every provider this build has runs Relu and FusedConv: cpu, and cuda in a CUDA build.
  EXPECT_EQ(relu->providers, built_provider_names());
  EXPECT_TRUE(has(relu->dtypes, DataType::Float));
  EXPECT_TRUE(covers(relu->opsets, 14));
  EXPECT_TRUE(relu->gradient);
  EXPECT_NE(autodiff::gradient_rules().find("Relu"), nullptr);

  const OpSupport* fused = find_row(rows, "com.microsoft", "FusedConv");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(domain_display_name(fused->domain), "com.microsoft");
  EXPECT_EQ(fused->providers, built_provider_names());
  EXPECT_TRUE(has(fused->dtypes, DataType::Float));
  EXPECT_TRUE(fused->gradient);  // trains through its rewrite into Conv and the activation

  // ArgMax is piecewise constant in its input: no rule, and integer outputs.
  const OpSupport* argmax = find_row(rows, "", "ArgMax");
  ASSERT_NE(argmax, nullptr);
  EXPECT_EQ(autodiff::gradient_rules().find("ArgMax"), nullptr);
  EXPECT_FALSE(argmax->gradient);
  EXPECT_TRUE(has(argmax->dtypes, DataType::Int64));
}

TEST(OpSupport, MergesRangesProvidersAndDtypes) {
  KernelRegistry gpu, cpu;
  gpu.add({.op_type = "X", .since = 13, .provider = "gpu", .types = {DataType::Float16}});
  cpu.add({.op_type = "X", .since = 1, .until = 5, .types = {DataType::Int64, DataType::Float}});
  cpu.add({.op_type = "X", .since = 6, .until = 12, .types = {DataType::Float}});
  cpu.add({.op_type = "Y", .since = 1, .until = 5, .types = {DataType::Bool, DataType::Double}});
  cpu.add({.op_type = "Y", .since = 9, .type_input = -1});
  cpu.add({.op_type = "Z", .domain = "com.example", .since = 2, .until = 2, .types = {DataType::Bool}});
  cpu.add({.op_type = "V", .domain = "ai.onnx", .since = 7, .types = {DataType::String}});
  std::vector<OpSupport> rows = build_op_support({&gpu, &cpu}, {"X", "W"});

  ASSERT_EQ(rows.size(), 5u);
  std::vector<std::string> order;
  for (const auto& r : rows) order.push_back(domain_display_name(r.domain) + "/" + r.op_type);
  EXPECT_EQ(order,
            (std::vector<std::string>{"ai.onnx/V", "ai.onnx/W", "ai.onnx/X", "ai.onnx/Y", "com.example/Z"}));

  const OpSupport& v = rows[0];
  EXPECT_EQ(opsets_str(v.opsets), "7+");
  EXPECT_FALSE(v.gradient);
  const OpSupport& w = rows[1];  // a gradient rule without any kernel is still listed
  EXPECT_TRUE(w.gradient);
  EXPECT_TRUE(w.providers.empty());
  EXPECT_EQ(opsets_str(w.opsets), "-");
  EXPECT_EQ(dtypes_str(w), "-");
  const OpSupport& x = rows[2];
  EXPECT_EQ(opsets_str(x.opsets), "1+");  // 1-5, 6-12 and 13+ touch
  EXPECT_EQ(x.providers, (std::vector<std::string>{"gpu", "cpu"}));
  EXPECT_EQ(dtypes_str(x), "float, float16, int64");
  EXPECT_TRUE(x.gradient);
  const OpSupport& y = rows[3];
  EXPECT_EQ(opsets_str(y.opsets), "1-5, 9+");
  EXPECT_TRUE(y.any_dtype);
  EXPECT_EQ(dtypes_str(y), "any");
  const OpSupport& z = rows[4];
  EXPECT_EQ(opsets_str(z.opsets), "2");
  EXPECT_EQ(dtypes_str(z), "bool");
}

TEST(OpSupport, ProviderFilterAndUnknownProvider) {
  std::vector<OpSupport> cpu_rows = op_support("cpu");
  EXPECT_FALSE(cpu_rows.empty());
  for (const auto& r : cpu_rows) EXPECT_TRUE(has_provider(r, "cpu")) << r.op_type;
  try {
    op_support("nosuch");
    FAIL() << "no error for an unknown provider";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("unknown provider 'nosuch'"), std::string::npos) << m;
    for (const std::string& p : built_provider_names()) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
}

/// `onyx ops` table lines split into cells (columns are separated by two or more spaces).
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  static const std::regex sep(" {2,}");
  for (std::string line; std::getline(in, line);)
    rows.push_back(
        {std::sregex_token_iterator(line.begin(), line.end(), sep, -1), std::sregex_token_iterator()});
  return rows;
}

class CliOps : public test::CliProcessTest {};

TEST_F(CliOps, TableListsEveryOpWithAHeaderAndACount) {
  test::CliResult r = onyx("ops");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<OpSupport> expected = op_support();
  auto rows = table_rows(r.out);
  ASSERT_EQ(rows.size(), expected.size() + 2) << r.out;
  EXPECT_EQ(rows.front(),
            (std::vector<std::string>{"DOMAIN", "OP", "OPSETS", "PROVIDERS", "GRADIENT", "DTYPES"}));
  size_t with_rule = gradient_rule_count();
  EXPECT_EQ(rows.back().front(),
            fmt::format("{} op types, {} with a gradient rule", expected.size(), with_rule));
  // Aligned: every row's gradient cell starts under the header's GRADIENT.
  std::istringstream lines(r.out);
  std::string header;
  std::getline(lines, header);
  size_t col = header.find("GRADIENT");
  for (size_t i = 0; i < expected.size(); ++i) {
    std::string line;
    std::getline(lines, line);
    EXPECT_EQ(line.substr(col, 3), expected[i].gradient ? "yes" : "no ") << line;
  }
  bool relu = false, fused = false, argmax = false;
  const std::string providers = fmt::format("{}", fmt::join(built_provider_names(), ","));
  for (const auto& row : rows) {
    ASSERT_FALSE(row.empty());
    if (row.size() != 6) continue;
    if (row[0] == "ai.onnx" && row[1] == "Relu") {
      relu = true;
      EXPECT_EQ(row[3], providers);
      EXPECT_EQ(row[4], "yes");
      EXPECT_NE(row[5].find("float"), std::string::npos) << row[5];
    }
    if (row[0] == "com.microsoft" && row[1] == "FusedConv") fused = row[3] == providers && row[4] == "yes";
    if (row[0] == "ai.onnx" && row[1] == "ArgMax") argmax = row[4] == "no";
  }
  EXPECT_TRUE(relu && fused && argmax) << r.out;
}

TEST_F(CliOps, GradientsListsExactlyTheRuleTableAndTheRewrittenOps) {
  test::CliResult r = onyx("ops --gradients");
  ASSERT_EQ(r.code, 0) << r.err;
  auto rows = table_rows(r.out);
  size_t n = gradient_rule_count();
  ASSERT_EQ(rows.size(), n + 2) << r.out;
  EXPECT_EQ(rows.back().front(), fmt::format("{} op types, {} with a gradient rule", n, n));
  std::set<std::pair<std::string, std::string>> listed, expected;
  for (size_t i = 1; i + 1 < rows.size(); ++i) {
    ASSERT_EQ(rows[i].size(), 6u) << r.out;
    EXPECT_EQ(rows[i][4], "yes");
    listed.insert({rows[i][0] == "ai.onnx" ? "" : rows[i][0], rows[i][1]});
  }
  for (const std::string& op : autodiff::gradient_rules().op_types()) expected.insert({"", op});
  for (const auto& p : autodiff::rewritten_op_types()) expected.insert(p);
  EXPECT_EQ(listed, expected);
}

TEST_F(CliOps, ProviderCpuJsonHasEveryField) {
  test::CliResult r = onyx("ops --provider cpu --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), op_support("cpu").size());
  bool relu = false;
  for (const auto& o : j) {
    for (const char* key : {"domain", "op", "opsets", "providers", "dtypes", "gradient"})
      ASSERT_TRUE(o.contains(key)) << key << " missing in " << o.dump();
    EXPECT_TRUE(o["domain"].is_string() && o["op"].is_string() && o["gradient"].is_boolean()) << o.dump();
    ASSERT_TRUE(o["opsets"].is_array() && !o["opsets"].empty()) << o.dump();
    for (const auto& range : o["opsets"])
      EXPECT_TRUE(range["since"].is_number_integer() &&
                  (range["until"].is_null() || range["until"].is_number_integer()))
          << o.dump();
    auto providers = o["providers"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(providers.begin(), providers.end(), "cpu"), providers.end()) << o.dump();
    ASSERT_TRUE(o["dtypes"].is_array() && !o["dtypes"].empty()) << o.dump();
    for (const auto& t : o["dtypes"]) {
      std::string name = t.get<std::string>();
      if (name != "any") {
        EXPECT_NO_THROW(dtype_from_name(name)) << name;
      }
    }
    if (o["domain"] == "ai.onnx" && o["op"] == "Relu") {
      relu = true;
      EXPECT_TRUE(o["gradient"].get<bool>());
      auto dtypes = o["dtypes"].get<std::vector<std::string>>();
      EXPECT_NE(std::find(dtypes.begin(), dtypes.end(), "float"), dtypes.end()) << o.dump();
    }
  }
  EXPECT_TRUE(relu);
}

TEST_F(CliOps, DomainFilter) {
  test::CliResult r = onyx("ops --domain com.microsoft --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j.empty());
  std::set<std::string> ops;
  for (const auto& o : j) {
    EXPECT_EQ(o["domain"], "com.microsoft");
    ops.insert(o["op"].get<std::string>());
  }
  EXPECT_TRUE(ops.count("FusedConv"));
  test::CliResult none = onyx("ops --domain no.such.domain --json");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_EQ(nlohmann::json::parse(none.out), nlohmann::json::array());
}

TEST_F(CliOps, UnknownProviderIsAOneLineError) {
  test::CliResult r = onyx("ops --provider nosuch");
  expect_one_line_error(r, "unknown provider 'nosuch' (this build has: ");
  EXPECT_NE(r.err.find("cpu"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  expect_one_line_error(onyx("frobnicate"), "ops");
  test::CliResult h = onyx("--help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("List the supported op types"), std::string::npos) << h.out;
}

}  // namespace
}  // namespace onyx
