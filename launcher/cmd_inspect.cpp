// onyx inspect: what a model file holds, without compiling it.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "graph/onnx_io.h"
#include "inference/session.h"
#include "launcher/commands.h"

namespace onyx::cli {
namespace {

struct InspectOptions {
  std::string model;
  bool plan = false;
  std::string opt = "all";
  ProviderOptions provider;
};

struct Totals {
  std::map<std::string, int64_t> ops;  // "Conv" or "com.microsoft.FusedConv" -> count
  int64_t params = 0, bytes = 0, initializers = 0, subgraph_nodes = 0;
};

/// Counts nodes and initializers of `g` and, recursively, of its subgraphs.
void tally(const Graph& g, Totals& totals, bool is_subgraph) {
  for (const auto& [name, t] : g.initializers) {
    ++totals.initializers;
    totals.params += t.numel();
    if (t.dtype() != DataType::String) {
      totals.bytes += static_cast<int64_t>(t.nbytes());
    } else if (t.numel() > 0) {
      for (int64_t i = 0; i < t.numel(); ++i)
        totals.bytes += static_cast<int64_t>(t.data<std::string>()[i].size());
    }
  }
  for (const auto& n : g.nodes()) {
    ++totals.ops[n->domain.empty() ? n->op_type : n->domain + "." + n->op_type];
    if (is_subgraph) ++totals.subgraph_nodes;
    for (const auto& [name, a] : n->attrs) {
      if (a.g) tally(*a.g, totals, true);
      for (const auto& sub : a.graphs) tally(*sub, totals, true);
    }
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

void print_values(const char* title, const std::vector<Value*>& values) {
  fmt::print("{} ({}):\n", title, values.size());
  size_t w = 0;
  for (const Value* v : values) w = std::max(w, v->name.size());
  for (const Value* v : values) fmt::print("  {:<{}}  {}\n", v->name, w, v->type.str());
}

/// --plan: compile the model as `onyx run` would and print where each node runs, copy
/// nodes included, then the totals per provider.
int print_plan(const InspectOptions& o) {
  SessionOptions so;
  so.opt_level = opt_level_from_name(o.opt);
  apply_provider_options(o.provider, so.providers, so.device_id);
  Session session(o.model, so);
  std::vector<NodePlacement> nodes = session.placement();
  size_t w = 0;
  for (const NodePlacement& p : nodes) w = std::max(w, p.node.size());
  fmt::print("plan of {} (--opt {}, providers {}): {} nodes in execution order\n", o.model, o.opt,
             o.provider.providers, nodes.size());
  std::map<std::string, int> per_provider;
  int copies = 0, fallback = 0;
  for (const NodePlacement& p : nodes) {
    fmt::print("  {:<{}}  {}{}\n", p.node, w, p.provider, p.fallback ? "  (fallback: no kernel on the device)" : "");
    ++per_provider[p.provider];
    copies += p.domain == "ai.onyx" && (p.op_type == "MemcpyFromHost" || p.op_type == "MemcpyToHost");
    fallback += p.fallback;
  }
  for (const auto& [name, n] : per_provider) fmt::print("{}: {} nodes\n", name, n);
  fmt::print("copy nodes: {}, fallback nodes: {}\n", copies, fallback);
  return 0;
}

int inspect(const InspectOptions& o) {
  if (o.plan) return print_plan(o);
  LoadOptions lo;
  lo.validate = false;  // show what the file holds, even what onyx would refuse to run
  auto model = load_model(o.model, lo);
  const Graph& g = *model->graph;

  fmt::print("model:        {}\n", o.model);
  fmt::print("ir version:   {}\n", model->ir_version);
  std::vector<std::string> opsets;
  for (const auto& op : model->opsets)
    opsets.push_back(fmt::format("{} {}", op.domain.empty() ? "ai.onnx" : op.domain, op.version));
  fmt::print("opsets:       {}\n", fmt::join(opsets, ", "));
  std::string producer = model->producer_name;
  if (!model->producer_version.empty()) producer += " " + model->producer_version;
  fmt::print("producer:     {}\n", producer.empty() ? "(none)" : producer);
  if (!model->domain.empty() || model->model_version != 0)
    fmt::print("domain:       {} (model version {})\n", model->domain, model->model_version);
  fmt::print("graph:        {}\n", g.name.empty() ? "(unnamed)" : g.name);
  for (const auto& [k, v] : model->metadata) fmt::print("metadata:     {} = {}\n", k, v);

  Totals totals;
  tally(g, totals, false);
  fmt::print("parameters:   {} elements, {} in {} initializers\n", totals.params,
             human_bytes(static_cast<double>(totals.bytes)), totals.initializers);
  print_values("inputs", g.inputs);
  if (!g.overridable_initializers.empty())
    fmt::print("  (and {} initializers a feed may override)\n", g.overridable_initializers.size());
  print_values("outputs", g.outputs);

  std::vector<std::pair<std::string, int64_t>> ops(totals.ops.begin(), totals.ops.end());
  std::stable_sort(ops.begin(), ops.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  int64_t nodes = 0;
  for (const auto& [op, n] : ops) nodes += n;
  fmt::print("ops ({} nodes{}):\n", nodes,
             totals.subgraph_nodes ? fmt::format(", {} in subgraphs", totals.subgraph_nodes) : "");
  size_t w = 0;
  for (const auto& [op, n] : ops) w = std::max(w, op.size());
  for (const auto& [op, n] : ops) fmt::print("  {:<{}}  {}\n", op, w, n);
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& parent, const CommonOptions&) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* app = parent.add_subcommand("inspect", "Show a model's inputs, outputs, ops and size");
  app->add_option("model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  app->add_flag("--plan", o->plan,
                "Compile the model and print each node's provider in execution order (copy and "
                "fallback nodes marked)");
  app->add_option("--opt", o->opt, "Graph optimization level for --plan")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "basic", "extended", "all"}));
  add_provider_options(app, o->provider);
  return {app, [o] { return inspect(*o); }};
}

}  // namespace onyx::cli
