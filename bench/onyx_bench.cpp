// onyx_bench: times one model on one input set for bench/run_bench.py and prints one JSON
// line {"median_ms", "mean_ms", "min_ms", "runs", "load_ms" (model read + session creation),
// "read_ms" (the model read alone), "first_run_ms"}.
//
//   onyx_bench --model m.onnx --inputs DIR [--threads 2] [--warmup 3] [--iters 20]
//              [--max-seconds 15] [--opt-level all] [--save-outputs DIR] [--profile FILE]
//              [--no-winograd]
//
// DIR holds input_<i>.pb (TensorProto, the model's input order); --save-outputs writes the
// outputs of the first run as output_<i>.pb so the driver can compare them with ORT's;
// --profile writes a Chrome trace of the timed runs (slower: one event per node).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <vector>

#include "graph/onnx_io.h"
#include "inference/session.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

onyx::NamedTensors read_inputs(const onyx::Session& session, const fs::path& dir) {
  onyx::NamedTensors feeds;
  for (size_t i = 0; i < session.inputs().size(); ++i) {
    fs::path p = dir / fmt::format("input_{}.pb", i);
    if (!fs::exists(p))
      throw onyx::Error(fmt::format("[onyx_bench] missing {} for input '{}'", p.string(),
                                    session.inputs()[i].name));
    feeds[session.inputs()[i].name] = onyx::load_tensor_pb(p.string());
  }
  return feeds;
}

void save_outputs(const onyx::Session& session, const onyx::NamedTensors& out,
                  const fs::path& dir) {
  fs::create_directories(dir);
  for (size_t i = 0; i < session.outputs().size(); ++i) {
    const std::string& name = session.outputs()[i].name;
    std::ofstream f(dir / fmt::format("output_{}.pb", i), std::ios::binary);
    f << onyx::serialize_tensor(out.at(name), name);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, inputs, save, profile, opt = "all", precision = "fp32", log_level = "warn";
  int threads = 2, warmup = 3, iters = 20;
  double max_seconds = 15;
  CLI::App app("Time one onyx model run on saved inputs (used by bench/run_bench.py)");
  app.add_option("--model", model, "ONNX model")->required()->check(CLI::ExistingFile);
  app.add_option("--inputs", inputs, "folder of input_<i>.pb")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed runs (at least 1)")->capture_default_str();
  app.add_option("--iters", iters, "timed runs at most")->capture_default_str();
  app.add_option("--max-seconds", max_seconds, "stop timing after this long (>= 3 runs)")
      ->capture_default_str();
  app.add_option("--opt-level", opt, "none, basic, extended, all")->capture_default_str();
  app.add_option("--precision", precision, "fp32, or bf16/fp16 (SessionOptions::precision)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--save-outputs", save, "write the outputs as output_<i>.pb here");
  app.add_option("--profile", profile, "write a Chrome trace of the runs here");
  app.add_option("--log-level", log_level,
                 "session log level (debug: where session creation's time goes)");
  bool no_winograd = false;
  app.add_flag("--no-winograd", no_winograd,
               "direct convolutions only (SessionOptions::winograd_convolutions = false)");
  bool no_prepack = false;
  app.add_flag("--no-prepack", no_prepack,
               "weights packed in the first run (SessionOptions::prepack_weights = false)");
  bool copy_weights = false;
  app.add_flag("--copy-weights", copy_weights,
               "copy external data out of its file (LoadOptions::map_external_data = false)");
  CLI11_PARSE(app, argc, argv);

  try {
    onyx::SessionOptions so;
    so.intra_op_threads = threads;
    so.opt_level = onyx::opt_level_from_name(opt);
    so.precision = onyx::parse_precision(precision);
    so.profiling = !profile.empty();
    so.profile_path = profile;
    so.log_level = log_level;
    so.winograd_convolutions = !no_winograd;
    so.prepack_weights = !no_prepack;
    auto t0 = Clock::now();
    onyx::LoadOptions lo;
    lo.map_external_data = !copy_weights;
    std::unique_ptr<onyx::Model> loaded = onyx::load_model(model, lo);
    const double read_ms = ms_since(t0);
    onyx::Session session(std::move(loaded), so);
    double load_ms = ms_since(t0);
    onyx::NamedTensors feeds = read_inputs(session, inputs);

    t0 = Clock::now();
    onyx::NamedTensors out = session.run(feeds);
    double first_ms = ms_since(t0);
    if (!save.empty()) save_outputs(session, out, save);
    out.clear();
    for (int i = 1; i < warmup; ++i) session.run(feeds);

    std::vector<double> ms;
    auto start = Clock::now();
    while (static_cast<int>(ms.size()) < std::max(iters, 1)) {
      t0 = Clock::now();
      session.run(feeds);
      ms.push_back(ms_since(t0));
      if (ms.size() >= 3 && ms_since(start) > max_seconds * 1e3) break;
    }
    if (!profile.empty()) session.end_profiling();
    std::sort(ms.begin(), ms.end());
    size_t n = ms.size();
    double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(n);
    fmt::print(
        "{{\"median_ms\": {:.4f}, \"mean_ms\": {:.4f}, \"min_ms\": {:.4f}, \"runs\": {}, "
        "\"load_ms\": {:.1f}, \"read_ms\": {:.1f}, \"first_run_ms\": {:.3f}}}\n",
        median, mean, ms.front(), n, load_ms, read_ms, first_ms);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "onyx_bench: " << e.what() << "\n";
    return 1;
  }
}
