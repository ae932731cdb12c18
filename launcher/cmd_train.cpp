// onyx train: train a model on .npy data with onyx::TrainingSession; progress bar, JSONL
// metrics, checkpoints, --resume, an exported inference model and a loss plot.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>

#include <unistd.h>

#include "distributed/communicator.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launcher/commands.h"
#include "launcher/loss_plot.h"
#include "launcher/progress.h"
#include "launcher/train_checkpoints.h"
#include "launcher/train_data.h"
#include "launcher/train_options.h"

namespace onyx::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

/// Reorders `data` to the session's batch inputs, converting each array to the declared dtype.
Dataset bind_dataset(Dataset data, const TrainingSession& ts, const std::string& flag) {
  const Graph& g = *ts.training_model().graph;
  Dataset bound;
  bound.dir = data.dir;
  bound.samples = data.samples;
  for (const auto& name : ts.batch_inputs()) {
    auto it = std::find(data.names.begin(), data.names.end(), npy_file_name(name));
    ONYX_CHECK(it != data.names.end(),
               "[train] {} '{}' lacks '{}' for the batch input '{}' "
               "(.npy files there: {})",
               flag, data.dir, npy_file_name(name), name, fmt::join(data.names, ", "));
    const Value* v = g.find_value(name);
    ONYX_CHECK(v != nullptr, "[train] the training graph has no input '{}'", name);
    Tensor t = std::move(data.arrays[static_cast<size_t>(it - data.names.begin())]);
    std::string file = (std::filesystem::path(data.dir) / *it).string();
    bound.arrays.push_back(check_for_input(std::move(t), DataInput{name, v->type}, file));
    bound.names.push_back(name);
  }
  for (const auto& file : data.names)
    if (std::none_of(ts.batch_inputs().begin(), ts.batch_inputs().end(),
                     [&](const std::string& n) { return npy_file_name(n) == file; }))
      spdlog::warn("{} '{}': ignoring '{}', which feeds no batch input ({})", flag, data.dir, file,
                   fmt::join(ts.batch_inputs(), ", "));
  return bound;
}

/// The shapes of the first batch of `data` (`batch` samples or all there are) for the model's
/// inputs and `labels`, so a recomputation budget is planned before training starts; empty
/// when a model input has no file (bind_dataset then names what is missing).
std::map<std::string, Shape> first_batch_shapes(const Dataset& data, const Model& forward,
                                                const std::string& labels, int64_t batch) {
  std::vector<std::string> wanted;
  for (const Value* v : forward.graph->inputs)
    if (!forward.graph->is_initializer(v)) wanted.push_back(v->name);
  std::map<std::string, Shape> shapes;
  for (const std::string& name : wanted) {
    auto it = std::find(data.names.begin(), data.names.end(), npy_file_name(name));
    if (it == data.names.end()) return {};
    Shape s = data.arrays[static_cast<size_t>(it - data.names.begin())].shape();
    s[0] = std::min(batch, data.samples);
    shapes[name] = s;
  }
  if (auto it = std::find(data.names.begin(), data.names.end(), npy_file_name(labels));
      it != data.names.end()) {
    Shape s = data.arrays[static_cast<size_t>(it - data.names.begin())].shape();
    s[0] = std::min(batch, data.samples);
    shapes[labels] = s;
  }
  return shapes;
}

/// Loss and (for classification losses) accuracy of the model on all of `data`.
struct Evaluation {
  double loss = 0;
  std::optional<double> accuracy;
};

Evaluation evaluate(const TrainingSession& ts, const Dataset& data, int64_t batch,
                    const std::string& prediction) {
  const auto& loss = ts.config().loss;
  bool classify = loss.kind == "softmax_cross_entropy" || loss.kind == "nll";
  std::vector<int64_t> order = epoch_order(data.samples, false, 0, 0);
  double loss_sum = 0;
  int64_t right = 0, counted = 0;
  for (int64_t begin = 0; begin < data.samples; begin += batch) {
    int64_t end = std::min(begin + batch, data.samples);
    NamedTensors b = gather_batch(data, order, begin, end);
    NamedTensors out = ts.eval_step(b);
    loss_sum += out.at("loss").to_double_vector().at(0) * static_cast<double>(end - begin);
    if (!classify) continue;
    // Scores [N, ..., C, d...] against labels [N, ..., d...]: classes on loss.class_axis
    // (1, as in ONNX, unless the loss says otherwise).
    const Tensor& scores = out.at(prediction);
    std::vector<double> s = scores.to_double_vector();
    std::vector<int64_t> labels = b.at(loss.labels).to_int64_vector();
    const int64_t rank = scores.rank();
    const int64_t axis = loss.class_axis < 0 ? loss.class_axis + rank : loss.class_axis;
    const int64_t classes = rank >= 2 ? scores.shape()[static_cast<size_t>(axis)] : 1;
    int64_t inner = 1;  // elements after the class axis
    for (int64_t d = axis + 1; d < rank; ++d) inner *= scores.shape()[static_cast<size_t>(d)];
    const int64_t outer = static_cast<int64_t>(labels.size()) / std::max<int64_t>(inner, 1);
    for (int64_t n = 0; n < outer; ++n)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t label = labels[static_cast<size_t>(n * inner + i)];
        if (loss.ignore_index && label == *loss.ignore_index) continue;
        int64_t best = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (s[static_cast<size_t>((n * classes + c) * inner + i)] >
              s[static_cast<size_t>((n * classes + best) * inner + i)])
            best = c;
        right += best == label;
        ++counted;
      }
  }
  Evaluation e;
  e.loss = loss_sum / static_cast<double>(data.samples);
  if (classify && counted > 0) e.accuracy = static_cast<double>(right) / counted;
  return e;
}

/// One JSON object per line, flushed at once so a crashed run keeps what it wrote.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    ONYX_CHECK(out_.good(), "[train] --metrics: cannot write '{}'", path);
  }
  void write(const nlohmann::json& j) {
    if (out_.is_open()) out_ << j.dump() << std::endl;
  }

 private:
  std::ofstream out_;
};

int train(const TrainOptions& o) {
  // Settle what can fail cheaply before a long run, not after it.
  ONYX_CHECK(!o.data.empty(),
             "[train] no --data folder given (on the command line or in "
             "--config)");
  // Under mpirun every rank trains data-parallel on its slice of each global batch.
  std::shared_ptr<dist::Communicator> comm;
  if (dist::launched_by_mpi()) comm = dist::make_mpi_communicator();
  ONYX_CHECK(!o.data_parallel || comm, "[train] --data-parallel needs several processes: start them "
             "with `onyx launch -n N -- onyx train ...` (mpirun), not directly");
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  const bool lead = rank == 0;  // only rank 0 prints, logs, plots and exports
  const int64_t global_batch = o.batch * world;
  if (!o.plot.empty() && !loss_plot_available()) plot_loss_png({}, o.plot, "");
  // The data decides the run's length, which linear and cosine schedules need up front.
  Dataset raw = load_npy_folder(o.data, "--data");
  // Data parallel: the last incomplete global batch of an epoch is dropped, so every rank
  // always has exactly --batch samples and averaging over ranks stays exact.
  const int64_t per_epoch =
      world > 1 ? raw.samples / global_batch : (raw.samples + o.batch - 1) / o.batch;
  ONYX_CHECK(per_epoch > 0, "[train] {} samples make no global batch of {} ({} ranks x --batch {})",
             raw.samples, global_batch, world, o.batch);
  const int64_t total_micro = o.epochs * per_epoch;
  const int64_t total_steps = total_micro / o.accumulate;
  ONYX_CHECK(total_steps > 0,
             "[train] {} micro-batches (--epochs {} x {}) make no optimizer step "
             "with --accumulate {}",
             total_micro, o.epochs, per_epoch, o.accumulate);
  if (total_micro % o.accumulate != 0)
    spdlog::warn("the last {} micro-batches complete no optimizer step (--accumulate {})",
                 total_micro % o.accumulate, o.accumulate);
  TrainingConfig config = training_config(o, total_steps);
  config.communicator = comm;
  if (lead) config.profile_path = o.profile;  // one profile, not one file written by every rank
  ONYX_CHECK(o.first_bucket_kb > 0 && o.bucket_kb > 0, "[train] bucket sizes must be positive");
  config.buckets.first_bucket_bytes = static_cast<int64_t>(o.first_bucket_kb * 1024);
  config.buckets.bucket_bytes = static_cast<int64_t>(o.bucket_kb * 1024);

  auto forward = load_model(o.model);
  std::string prediction = o.loss_output;
  if (prediction.empty() && !forward->graph->outputs.empty())
    prediction = forward->graph->outputs.front()->name;
  if (config.recompute.budget_bytes > 0)
    config.recompute.input_shapes = first_batch_shapes(raw, *forward, o.labels, o.batch);
  auto t_build = Clock::now();
  TrainingSession ts(std::move(forward), config);
  spdlog::info("built the training graph in {:.2f} s", seconds_since(t_build));
  const bool recomputes = !o.recompute.empty() || config.recompute.budget_bytes > 0;
  bool recompute_reported = false;
  auto report_recompute = [&] {
    if (!recomputes || recompute_reported || !lead || ts.recompute_report().candidates == 0) return;
    fmt::print("{}\n", ts.recompute_report().summary());
    recompute_reported = true;
  };
  Dataset data = bind_dataset(std::move(raw), ts, "--data");
  std::optional<Dataset> val;
  if (!o.val_data.empty())
    val = bind_dataset(load_npy_folder(o.val_data, "--val-data"), ts, "--val-data");

  // The layout records the global batch, so a checkpoint resumes with any number of ranks.
  RunLayout layout{data.samples, global_batch, o.accumulate, o.shuffle};
  int64_t micro = 0;
  std::string resumed_from;  // the last good checkpoint until this run saves one
  if (!o.resume.empty()) {
    std::string path = resumed_from = resolve_checkpoint(o.resume);
    micro = load_run_checkpoint(ts, path, layout);
    if (lead)
      fmt::print("resumed from {} at step {} (epoch {}, batch {})\n", path, ts.step(),
                 micro / per_epoch + 1, micro % per_epoch);
  }
  // After --resume the checkpoint's seed rules, so shuffling continues the same sequence.
  const uint64_t seed = ts.config().seed;

  if (comm) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    fmt::print("rank {}/{} on host {}: data-parallel, {} samples per rank per step\n", rank, world,
               host, o.batch);
  }
  if (lead)
    fmt::print(
        "training {}: {} parameters, {} samples, {} batches of {} per epoch, {} epochs, "
        "{} optimizer steps{}\n",
        o.model, ts.parameter_names().size(), data.samples, per_epoch, global_batch, o.epochs,
        total_steps,
        config.precision == Precision::Float32 ? "" : fmt::format(", {} mixed precision", precision_name(config.precision)));
  report_recompute();
  std::fflush(stdout);
  MetricsLog metrics(lead ? o.metrics : std::string(), !o.resume.empty());
  ProgressBar bar(lead && !o.no_progress && ProgressBar::is_terminal(stderr), stderr);
  LossCurve curve;
  std::string last_checkpoint;
  int64_t last_checkpoint_step = -1;
  // A failed save (disk full) does not lose the run: it is reported at once, the previous
  // checkpoint stays, training goes on, and the run exits non-zero at the end.
  int failed_saves = 0;
  std::string first_failure;
  auto last_good = [&] {
    return !last_checkpoint.empty() ? last_checkpoint : !resumed_from.empty() ? resumed_from : "none";
  };
  auto checkpoint = [&] {
    try {
      last_checkpoint = save_run_checkpoint(ts, o.checkpoint_dir, layout);
      last_checkpoint_step = ts.step();
    } catch (const Error& e) {
      if (failed_saves++ == 0) first_failure = e.what();
      if (lead)
        spdlog::warn("checkpoint of step {} not saved, training goes on (the last checkpoint is {}): {}",
                     ts.step(), last_good(), e.what());
    }
  };
  double group_loss = 0, group_seconds = 0;
  int64_t group_micro = 0, group_samples = 0;
  int64_t skipped_steps = 0;  // fp16 steps the loss scaler skipped

  for (int64_t epoch = micro / per_epoch; epoch < o.epochs; ++epoch) {
    std::vector<int64_t> order = epoch_order(data.samples, o.shuffle, seed, epoch);
    auto t_epoch = Clock::now();
    double epoch_loss = 0;
    int64_t epoch_samples = 0;
    for (int64_t b = micro % per_epoch; b < per_epoch; ++b) {
      int64_t begin = b * global_batch, end = std::min(begin + global_batch, data.samples);
      if (world > 1) begin += rank * o.batch, end = begin + o.batch;  // this rank's slice
      auto t_step = Clock::now();
      StepResult r = ts.train_step_detailed(gather_batch(data, order, begin, end));
      double dt = seconds_since(t_step);
      report_recompute();  // a budget planned from the first batch is known now
      ++micro;
      epoch_loss += r.loss * static_cast<double>(end - begin);
      epoch_samples += end - begin;
      group_loss += r.loss, group_seconds += dt, group_samples += end - begin, ++group_micro;
      if (r.skipped) {
        // fp16: the loss scaler found inf/NaN gradients; no step, a smaller scale.
        ++skipped_steps;
        metrics.write({{"type", "skipped_step"},
                       {"step", ts.step()},
                       {"epoch", epoch + 1},
                       {"loss", group_loss / static_cast<double>(group_micro)},
                       {"loss_scale", r.loss_scale},
                       {"next_loss_scale", ts.loss_scale()}});
        group_loss = group_seconds = 0, group_micro = group_samples = 0;
      }
      if (r.stepped) {
        double loss = group_loss / static_cast<double>(group_micro);
        nlohmann::json step = {{"type", "step"},
                               {"step", ts.step()},
                               {"epoch", epoch + 1},
                               {"loss", loss},
                               {"lr", r.lr},
                               {"grad_norm", r.grad_norm},
                               {"samples_per_s", static_cast<double>(group_samples) / group_seconds}};
        if (r.loss_scale > 0) step["loss_scale"] = r.loss_scale;
        if (comm) step["comm_wait_ms"] = r.comm_wait_ms;  // allreduce time backward left exposed
        metrics.write(step);
        curve.steps.push_back(static_cast<double>(ts.step()));
        curve.loss.push_back(loss);
        group_loss = group_seconds = 0, group_micro = group_samples = 0;
        if (o.checkpoint_every > 0 && ts.step() % o.checkpoint_every == 0) checkpoint();
      }
      bar.update(fmt::format("epoch {}/{}", epoch + 1, o.epochs), b + 1, per_epoch,
                 fmt::format("loss {:.4f}  lr {:.2e}  {:.0f} samples/s", r.loss, ts.learning_rate(),
                             epoch_samples / seconds_since(t_epoch)),
                 b + 1 == per_epoch);
    }
    bar.clear();
    double train_seconds = seconds_since(t_epoch);
    nlohmann::json summary = {{"type", "epoch"},
                              {"epoch", epoch + 1},
                              {"step", ts.step()},
                              {"train_loss", epoch_loss / std::max<double>(epoch_samples, 1)},
                              {"samples_per_s", epoch_samples / train_seconds},
                              {"seconds", train_seconds}};
    std::string line = fmt::format("epoch {}/{}  loss {:.4f}", epoch + 1, o.epochs,
                                   summary["train_loss"].get<double>());
    if (val) {
      Evaluation e = evaluate(ts, *val, o.batch, prediction);
      summary["val_loss"] = e.loss;
      line += fmt::format("  val_loss {:.4f}", e.loss);
      curve.val_steps.push_back(static_cast<double>(ts.step()));
      curve.val_loss.push_back(e.loss);
      if (e.accuracy) {
        summary["val_accuracy"] = *e.accuracy;
        line += fmt::format("  val_accuracy {:.2f}%", 100 * *e.accuracy);
      }
    }
    metrics.write(summary);
    if (ts.loss_scale() > 0) {
      summary["loss_scale"] = ts.loss_scale();
      summary["skipped_steps"] = skipped_steps;
      line += fmt::format("  loss_scale {:g} ({} skipped)", ts.loss_scale(), skipped_steps);
    }
    if (lead)
      fmt::print("{}  lr {:.2e}  {:.0f} samples/s  {:.2f} s\n", line, ts.learning_rate(),
                 epoch_samples * world / train_seconds, train_seconds);
    std::fflush(stdout);
  }

  if (!o.checkpoint_dir.empty() && last_checkpoint_step != ts.step()) checkpoint();
  if (!last_checkpoint.empty() && lead) fmt::print("checkpoint: {}\n", last_checkpoint);
  // The trained model is still exported: it is the run's result even when a save failed.
  auto report_failed_saves = [&] {
    ONYX_CHECK(failed_saves == 0, "[train] {} checkpoint save(s) failed, the last checkpoint is {}; the first "
               "failure: {}", failed_saves, last_good(), first_failure);
  };
  if (!lead) {
    report_failed_saves();
    return 0;
  }
  std::string exported = o.export_path.empty() ? default_export_path(o.model) : o.export_path;
  ts.export_inference_model(exported);
  fmt::print("exported the trained model to {}\n", exported);
  if (!o.metrics.empty()) fmt::print("metrics: {}\n", o.metrics);
  if (!o.profile.empty()) fmt::print("profile written to {}\n", ts.end_profiling());
  if (!o.plot.empty()) {
    plot_loss_png(curve, o.plot, std::filesystem::path(o.model).filename().string());
    fmt::print("loss plot: {}\n", o.plot);
  }
  report_failed_saves();
  return 0;
}

}  // namespace

Command add_train_command(CLI::App& parent, const CommonOptions&) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* app = parent.add_subcommand(
      "train", "Train a model on .npy data and export the trained inference model");
  add_train_options(app, *o);
  return {app, [o, app] {
            apply_config_file(app, o->config);
            return train(*o);
          }};
}

}  // namespace onyx::cli
