// recompute_bench: training step time and peak activation memory of one model with and
// without activation recomputation (autodiff/recompute.h), side by side, and the check that
// both compute the same gradients bit for bit.
//
//   recompute_bench --model gpt2.onnx --pattern '^/h\.\d+/' [--batch 8] [--seq 128]
//                   [--steps 5] [--threads 2] [--input tokens] [--vocab 1000]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "training/training_session.h"

namespace {

struct Row {
  std::string what;
  double median_ms = 0;
  size_t peak = 0;
  std::vector<float> grads;
  double loss = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model, pattern, input = "tokens";
  int64_t batch = 8, seq = 128, vocab = 1000;
  int steps = 5, threads = 2, every = 1;
  CLI::App app{"training step time and peak memory with and without recomputation"};
  app.add_option("--model", model)->required();
  app.add_option("--pattern", pattern)->required();
  app.add_option("--every", every);
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
  for (bool recompute : {false, true}) {
    onyx::TrainingConfig c;
    c.loss.class_axis = -1;
    c.optimizer = {.name = "sgd", .lr = 0.0};  // lr 0: every step sees the same weights
    c.threads = threads;
    if (recompute) c.recompute = {.pattern = pattern, .every = every};
    onyx::TrainingSession ts(model, c);
    Row r{recompute ? fmt::format("recompute '{}' every {}", pattern, every) : "keep activations"};
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
  fmt::print("{:<40} {:>12} {:>14}\n", "variant", "step ms", "peak MiB");
  for (const Row& r : rows)
    fmt::print("{:<40} {:>12.1f} {:>14.1f}\n", r.what, r.median_ms, r.peak / 1048576.0);
  const bool same = rows[0].grads == rows[1].grads && rows[0].loss == rows[1].loss;
  fmt::print("peak memory {:.2f}x, step time {:.2f}x; gradients {}\n",
             double(rows[1].peak) / double(rows[0].peak), rows[1].median_ms / rows[0].median_ms,
             same ? "bit-identical" : "DIFFER");
  return same ? 0 : 1;
}
