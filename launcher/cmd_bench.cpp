// onyx bench: latency percentiles and throughput of one model on random inputs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "launcher/commands.h"
#include "launcher/feeds.h"

namespace onyx::cli {
namespace {

struct BenchOptions {
  ProviderOptions provider;
  std::string model, opt = "all", precision = "fp32";
  std::vector<std::string> dims;
  int threads = 0, iters = 100, warmup = 10;
  int64_t batch = 1;
  uint64_t seed = 0;
  bool no_winograd = false;
  bool flush_denormals = false;
};

/// Nearest-rank percentile of sorted `v`.
double percentile(const std::vector<double>& v, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

int bench(const BenchOptions& o, const CommonOptions& common) {
  SessionOptions so;
  so.intra_op_threads = o.threads;
  so.opt_level = opt_level_from_name(o.opt);
  so.precision = parse_precision(o.precision);
  so.winograd_convolutions = !o.no_winograd;
  so.flush_denormals = o.flush_denormals;
  apply_provider_options(o.provider, so.providers, so.device_id);
  so.log_level = common.log_level;
  Session session(o.model, so);
  NamedValues feeds = make_feeds(session, {}, true, parse_dims(o.dims), o.batch, o.seed);

  fmt::print("model: {}\n", o.model);
  for (const auto& [name, v] : feeds)
    fmt::print("  input {}: {}{}\n", name, dtype_name(v.tensor.dtype()),
               shape_str(v.tensor.shape()));
  for (int i = 0; i < o.warmup; ++i) session.run_values(feeds);

  std::vector<double> ms(static_cast<size_t>(o.iters));
  for (auto& m : ms) {
    auto t0 = std::chrono::steady_clock::now();
    session.run_values(feeds);
    m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  double total = std::accumulate(ms.begin(), ms.end(), 0.0), mean = total / ms.size();
  std::sort(ms.begin(), ms.end());
  fmt::print("threads {}, batch {}, {} warmup + {} timed runs\n",
             o.threads == 0 ? std::string("auto") : std::to_string(o.threads), o.batch, o.warmup,
             o.iters);
  fmt::print(
      "latency ms: p50 {:.4g}  p90 {:.4g}  p99 {:.4g}  mean {:.4g}  min {:.4g}  max {:.4g}\n",
      percentile(ms, 50), percentile(ms, 90), percentile(ms, 99), mean, ms.front(), ms.back());
  fmt::print("throughput: {:.5g} runs/s, {:.5g} samples/s\n", 1000.0 / mean,
             1000.0 * static_cast<double>(o.batch) / mean);
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& parent, const CommonOptions& common) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* app = parent.add_subcommand("bench", "Measure latency and throughput on random inputs");
  app->add_option("model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  app->add_option("-t,--threads", o->threads, "Intra-op threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("-b,--batch", o->batch, "Size of each input's first symbolic dimension")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("-n,--iters", o->iters, "Timed runs")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("-w,--warmup", o->warmup, "Untimed runs first")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--dim", o->dims, "Size of another symbolic dimension, NAME=VALUE")
      ->allow_extra_args(false);
  app->add_option("--seed", o->seed, "Seed for the random inputs")->capture_default_str();
  app->add_option("--opt", o->opt, "Graph optimization level")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "basic", "extended", "all"}));
  add_precision_option(app, o->precision);
  add_winograd_option(app, o->no_winograd);
  add_flush_denormals_option(app, o->flush_denormals);
  add_provider_options(app, o->provider);
  return {app, [o, &common] { return bench(*o, common); }};
}

}  // namespace onyx::cli
