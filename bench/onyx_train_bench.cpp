// onyx_train_bench: times TrainingSession::train_step on one model and one fixed batch for
// bench/run_train.sh and prints one JSON line {"setup_ms", "median_ms", "mean_ms", "min_ms",
// "runs", "losses", "base_rss_mb", "peak_rss_mb"}.
//
//   onyx_train_bench --model m.onnx --data DIR [--threads 2] [--warmup 3] [--iters 10]
//                    [--max-seconds 60] [--lr 1e-3] [--weight-decay 0.01]
//                    [--precision fp32|bf16|fp16] [--profile trace.json] [--keep-denormals]
//                    [--save-training-graph train.onnx]
//
// DIR holds <name>.pb (TensorProto) for every batch input the session asks for (the model's
// inputs, then "labels"). The loss is softmax cross-entropy (mean) on the model's first
// output; the optimizer is AdamW, decaying every parameter as torch.optim.AdamW does. "losses"
// lists the loss of every step, warm-up included, so the driver can compare them with
// PyTorch's. Peak RSS is the process's high-water mark (VmHWM), so run one model per process.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "graph/onnx_io.h"
#include "training/training_session.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A "Vm...:  1234 kB" line of /proc/self/status in MB; getrusage's peak when /proc is absent.
double status_mb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

onyx::NamedTensors read_batch(const onyx::TrainingSession& ts, const fs::path& dir) {
  onyx::NamedTensors batch;
  for (const std::string& name : ts.batch_inputs()) {
    fs::path p = dir / (name + ".pb");
    if (!fs::exists(p))
      throw onyx::Error(fmt::format(
          "[onyx_train_bench] expected {} for batch input '{}', found none", p.string(), name));
    batch[name] = onyx::load_tensor_pb(p.string());
  }
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, data;
  int threads = 2, warmup = 3, iters = 10;
  int64_t class_axis = 1;
  double max_seconds = 60, lr = 1e-3, weight_decay = 0.01;
  std::string precision = "fp32", profile, save_graph;
  CLI::App app("Time onyx training steps on one fixed batch (used by bench/run_train.sh)");
  app.add_option("--model", model, "forward ONNX model")->required()->check(CLI::ExistingFile);
  app.add_option("--data", data, "folder of <input>.pb")->required()->check(CLI::ExistingDirectory);
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps")->capture_default_str();
  app.add_option("--iters", iters, "timed steps at most")->capture_default_str();
  app.add_option("--max-seconds", max_seconds, "stop timing after this long (>= 3 steps)")
      ->capture_default_str();
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--precision", precision, "fp32, or bf16/fp16 mixed precision")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--class-axis", class_axis,
                 "axis of the scores holding the classes (1: [N, C, ...]; -1: LM logits [N, S, C])")
      ->capture_default_str();
  bool keep_denormals = false;
  app.add_flag("--keep-denormals", keep_denormals,
               "IEEE denormals in the training graph (the default flushes them to zero)");
  app.add_option("--profile", profile,
                 "Chrome trace of the training graph's runs (adds time to the steps it times)");
  app.add_option("--save-training-graph", save_graph,
                 "write the training graph (forward, loss, backward; before the session's "
                 "optimizer) as ONNX, to read what a profile's node names refer to");
  CLI11_PARSE(app, argc, argv);

  try {
    const double base_mb = status_mb("VmRSS");
    onyx::TrainingConfig cfg;
    cfg.loss.kind = "softmax_cross_entropy";
    cfg.loss.class_axis = class_axis;
    cfg.optimizer = {.name = "adamw", .lr = lr, .weight_decay = weight_decay};
    cfg.decay_1d = true;  // torch.optim.AdamW decays biases and norm scales too
    cfg.threads = threads;
    cfg.precision = onyx::parse_precision(precision);
    cfg.profile_path = profile;
    cfg.flush_denormals = !keep_denormals;
    auto t0 = Clock::now();
    onyx::TrainingSession ts(model, cfg);
    const double setup_ms = ms_since(t0);
    if (!save_graph.empty()) onyx::save_model(ts.training_model(), save_graph);
    const onyx::NamedTensors batch = read_batch(ts, data);

    std::vector<double> losses, ms;
    for (int i = 0; i < warmup; ++i) losses.push_back(ts.train_step(batch));
    auto start = Clock::now();
    while (static_cast<int>(ms.size()) < std::max(iters, 3)) {
      t0 = Clock::now();
      losses.push_back(ts.train_step(batch));
      ms.push_back(ms_since(t0));
      if (ms.size() >= 3 && ms_since(start) > max_seconds * 1e3) break;
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(n);
    fmt::print(
        "{{\"setup_ms\": {:.1f}, \"median_ms\": {:.3f}, \"mean_ms\": {:.3f}, \"min_ms\": {:.3f}, "
        "\"runs\": {}, \"losses\": [{:.7g}], \"base_rss_mb\": {:.1f}, \"peak_rss_mb\": {:.1f}}}\n",
        setup_ms, median, mean, sorted.front(), n, fmt::join(losses, ", "), base_mb,
        status_mb("VmHWM"));
    if (!profile.empty()) std::cerr << "profile written to " << ts.end_profiling() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "onyx_train_bench: " << e.what() << "\n";
    return 1;
  }
}
