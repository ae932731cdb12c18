// onyx_soak: memory over a long run, for bench/soak.sh. Trains a small MLP built here
// (x[32, 64] -> Gemm 256 -> Relu -> Gemm 10, softmax cross-entropy, AdamW) for --steps steps,
// then runs an inference Session of the same model --runs times, reading VmRSS from
// /proc/self/status every --train-every steps and --run-every runs. Prints one table row per
// sample and a final JSON line {"train": {...}, "infer": {...}} holding, per phase, the samples,
// the first, last and largest RSS, and the least-squares slope of RSS over the second half in
// KB per 1000 iterations (the first half holds the allocator's warm-up).
//
//   onyx_soak [--steps 10000] [--runs 100000] [--train-every 500] [--run-every 5000] [--threads 2]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "inference/session.h"
#include "training/training_session.h"

namespace {

constexpr int64_t kBatch = 32, kIn = 64, kHidden = 256, kClasses = 10;

int64_t rss_kb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  throw onyx::Error("[onyx_soak] /proc/self/status has no VmRSS line");
}

onyx::Tensor random_tensor(const onyx::Shape& shape, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.f, scale);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return onyx::Tensor::from_vector<float>(shape, v);
}

std::unique_ptr<onyx::Model> mlp() {
  using namespace onyx;
  std::mt19937 rng(7);
  auto m = std::make_unique<Model>();
  m->ir_version = 8;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("soak_mlp");
  Graph& g = *m->graph;
  Value* x = g.get_or_add_value("x");
  x->type = ValueType::tensor(DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(kIn)});
  g.inputs.push_back(x);
  g.add_initializer("w1", random_tensor({kHidden, kIn}, rng, 0.1f));
  g.add_initializer("b1", random_tensor({kHidden}, rng, 0.01f));
  g.add_initializer("w2", random_tensor({kClasses, kHidden}, rng, 0.1f));
  g.add_initializer("b2", random_tensor({kClasses}, rng, 0.01f));
  auto gemm = [&](const char* in, const char* w, const char* b, const char* out) {
    Node* n = g.add_node("Gemm", {g.get_or_add_value(in), g.get_or_add_value(w), g.get_or_add_value(b)},
                         {g.get_or_add_value(out)}, "", std::string("gemm_") + out);
    n->attrs["transB"] = Attribute::of_int("transB", 1);
  };
  gemm("x", "w1", "b1", "h");
  g.add_node("Relu", {g.get_or_add_value("h")}, {g.get_or_add_value("hr")}, "", "relu");
  gemm("hr", "w2", "b2", "logits");
  g.outputs.push_back(g.get_or_add_value("logits"));
  return m;
}

/// Least-squares slope of rss over iteration, in KB per 1000 iterations.
double slope_per_1000(const std::vector<std::pair<int64_t, int64_t>>& s) {
  double n = static_cast<double>(s.size()), mx = 0, my = 0;
  for (auto [i, r] : s) mx += static_cast<double>(i) / n, my += static_cast<double>(r) / n;
  double sxy = 0, sxx = 0;
  for (auto [i, r] : s) {
    sxy += (static_cast<double>(i) - mx) * (static_cast<double>(r) - my);
    sxx += (static_cast<double>(i) - mx) * (static_cast<double>(i) - mx);
  }
  return sxx > 0 ? 1000.0 * sxy / sxx : 0.0;
}

/// Calls `step(i)` for i in [1, total], sampling RSS at 0 and every `every`; prints the rows.
template <class Step>
nlohmann::json soak(const char* phase, int64_t total, int64_t every, Step step) {
  std::vector<std::pair<int64_t, int64_t>> samples{{0, rss_kb()}};
  fmt::print("{:<6} {:>9} {:>10}\n", phase, 0, samples.back().second);
  for (int64_t i = 1; i <= total; ++i) {
    step(i);
    if (i % every != 0 && i != total) continue;
    samples.emplace_back(i, rss_kb());
    fmt::print("{:<6} {:>9} {:>10}\n", phase, i, samples.back().second);
    std::fflush(stdout);
  }
  std::vector<std::pair<int64_t, int64_t>> second_half;
  int64_t max_kb = 0;
  for (auto [i, r] : samples) {
    if (2 * i >= total) second_half.push_back({i, r});
    max_kb = std::max(max_kb, r);
  }
  nlohmann::json j = {{"iterations", total},
                      {"first_kb", samples.front().second},
                      {"last_kb", samples.back().second},
                      {"max_kb", max_kb},
                      {"slope_kb_per_1000", slope_per_1000(second_half)},
                      {"samples", nlohmann::json::array()}};
  for (auto [i, r] : samples) j["samples"].push_back({i, r});
  fmt::print("{}: RSS {} -> {} kB (max {}), slope over iterations {}..{}: {:.2f} KB per 1000\n", phase,
             samples.front().second, samples.back().second, max_kb, second_half.front().first, total,
             j["slope_kb_per_1000"].get<double>());
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("onyx_soak: RSS over long training and inference runs");
  int64_t steps = 10000, runs = 100000, train_every = 500, run_every = 5000;
  int threads = 2;
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--runs", runs, "Session::run calls")->check(CLI::PositiveNumber);
  app.add_option("--train-every", train_every, "steps between RSS samples")->check(CLI::PositiveNumber);
  app.add_option("--run-every", run_every, "runs between RSS samples")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    // A few fixed batches, cycled: the data itself allocates nothing per step.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int64_t> label(0, kClasses - 1);
    std::vector<onyx::NamedTensors> batches;
    for (int b = 0; b < 8; ++b) {
      std::vector<int64_t> y(kBatch);
      for (auto& v : y) v = label(rng);
      batches.push_back({{"x", random_tensor({kBatch, kIn}, rng, 1.f)},
                         {"labels", onyx::Tensor::from_vector<int64_t>({kBatch}, y)}});
    }
    fmt::print("{:<6} {:>9} {:>10}\n", "phase", "iteration", "VmRSS_kB");
    onyx::TrainingConfig cfg;
    cfg.loss.kind = "softmax_cross_entropy";
    cfg.optimizer = {.name = "adamw", .lr = 1e-3, .weight_decay = 0.01};
    cfg.threads = threads;
    nlohmann::json out;
    double loss = 0;
    {
      onyx::TrainingSession ts(mlp(), cfg);
      out["train"] = soak("train", steps, train_every,
                          [&](int64_t i) { loss = ts.train_step(batches[static_cast<size_t>(i) % batches.size()]); });
    }
    out["train"]["final_loss"] = loss;
    onyx::Session session(mlp(), {.intra_op_threads = threads});
    onyx::NamedTensors feed{{"x", batches[0].at("x")}};
    out["infer"] = soak("infer", runs, run_every, [&](int64_t) { session.run(feed); });
    std::cout << out.dump() << std::endl;
  } catch (const onyx::Error& e) {
    std::cerr << "onyx_soak: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
