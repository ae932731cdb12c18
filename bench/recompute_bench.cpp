// recompute_bench: training step time and peak activation memory of one model without
// activation recomputation (autodiff/recompute.h), with the segments a pattern marks, and with
// the segments chosen for a memory budget, side by side, and the check that all compute the
// same gradients bit for bit. Each row also shows the planned peak (the estimate the budget is
// held to; for the first row an unbinding budget makes the planner estimate without changing
// anything).
//
//   recompute_bench --model gpt2.onnx --pattern '^/h\.\d+/' [--budget 128] [--batch 8]
//                   [--seq 128] [--steps 5] [--threads 2] [--input tokens] [--vocab 1000]
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>

#include "training/training_session.h"

namespace {

struct Row {
  std::string what;
  double median_ms = 0;
  size_t peak = 0;
  onyx::autodiff::RecomputeReport plan;
  std::vector<float> grads;
  double loss = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model, pattern, input = "tokens";
  int64_t batch = 8, seq = 128, vocab = 1000;
  int steps = 5, threads = 2, every = 1;
  double budget_mib = 0;
  CLI::App app{"training step time and peak memory with and without recomputation"};
  app.add_option("--model", model)->required();
  app.add_option("--pattern", pattern)->required();
  app.add_option("--every", every);
  app.add_option("--budget", budget_mib, "MiB: add a row recomputing for this budget");
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--vocab", vocab);
  app.add_option("--input", input);
  app.add_option("--steps", steps);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);

  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  std::vector<int64_t> x(static_cast<size_t>(batch * seq)), y(x.size());
  for (auto& v : x) v = tok(rng);
  for (auto& v : y) v = tok(rng);
  onyx::NamedTensors b = {{input, onyx::Tensor::from_vector<int64_t>({batch, seq}, x)},
                          {"labels", onyx::Tensor::from_vector<int64_t>({batch, seq}, y)}};
  std::vector<Row> rows;
  const std::map<std::string, onyx::Shape> shapes = {{input, {batch, seq}},
                                                     {"labels", {batch, seq}}};
  struct Variant {
    std::string what;
    onyx::autodiff::RecomputeSpec spec;
  };
  std::vector<Variant> variants = {
      {"keep activations", {.budget_bytes = int64_t(1) << 60, .input_shapes = shapes}},
      {fmt::format("recompute '{}' every {}", pattern, every),
       {.pattern = pattern, .every = every, .input_shapes = shapes}}};
  if (budget_mib > 0)
    variants.push_back({fmt::format("budget {} MiB", budget_mib),
                        {.budget_bytes = static_cast<int64_t>(budget_mib * 1048576.0),
                         .input_shapes = shapes}});
  for (const Variant& v : variants) {
    onyx::TrainingConfig c;
    c.loss.class_axis = -1;
    c.optimizer = {.name = "sgd", .lr = 0.0};  // lr 0: every step sees the same weights
    c.threads = threads;
    c.recompute = v.spec;
    onyx::TrainingSession ts(model, c);
    Row r{v.what};
    r.plan = ts.recompute_report();
    std::vector<double> ms;
    for (int s = 0; s < steps + 1; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      onyx::StepResult st = ts.train_step_detailed(b);
      double dt = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) ms.push_back(dt);  // the first step warms the arena up
      r.peak = std::max(r.peak, st.peak_bytes);
      r.loss = st.loss;
    }
    std::sort(ms.begin(), ms.end());
    r.median_ms = ms[ms.size() / 2];
    onyx::Tensor g = ts.flat_gradients();
    r.grads.assign(g.data<float>(), g.data<float>() + g.numel());
    rows.push_back(std::move(r));
  }
  fmt::print("{} batch {} seq {}, {} threads, median of {} steps\n", model, batch, seq, threads,
             steps);
  fmt::print("{:<36} {:>9} {:>10} {:>12} {:>9}\n", "variant", "step ms", "peak MiB",
             "planned MiB", "segments");
  for (const Row& r : rows)
    fmt::print("{:<36} {:>9.1f} {:>10.1f} {:>12.1f} {:>9}\n", r.what, r.median_ms,
               r.peak / 1048576.0, r.plan.planned_peak_after / 1048576.0,
               fmt::format("{}/{}", r.plan.chosen, r.plan.candidates));
  for (const Row& r : rows)
    if (!r.plan.segments.empty())
      fmt::print("{}: {}\n", r.what, fmt::join(r.plan.segments, " | "));
  bool same = true;
  for (const Row& r : rows) {
    same = same && r.grads == rows[0].grads && r.loss == rows[0].loss;
    if (&r != &rows[0])
      fmt::print("{}: peak memory {:.2f}x, step time {:.2f}x\n", r.what,
                 double(r.peak) / double(rows[0].peak), r.median_ms / rows[0].median_ms);
  }
  fmt::print("gradients {}\n", same ? "bit-identical" : "DIFFER");
  return same ? 0 : 1;
}
