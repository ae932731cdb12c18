// The options of `onyx train`, their command-line and JSON-config spellings, and their
// translation into an onyx::TrainingConfig.
//
// Every long option is also a key of the --config JSON file (without the dashes; values as
// JSON numbers, strings, booleans or, for --betas, a two-element array); options given on the
// command line override the file:
//
//   {"data": "out/digits/train", "val-data": "out/digits/test", "optimizer": "adamw",
//    "lr": 0.003, "schedule": "cosine", "warmup": 40, "epochs": 20, "batch": 32}
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "training/training_session.h"

namespace onyx::cli {

struct TrainOptions {
  std::string model, data, val_data;
  // Loss.
  std::string loss = "softmax_cross_entropy", loss_output, labels = "labels";
  int64_t class_axis = 1;
  std::vector<std::string> freeze, param_groups;  // regexes; "REGEX:lr=X,weight_decay=Y"
  bool decay_1d = false;
  std::string recompute;  // regex over forward node names: one segment per distinct match
  int recompute_every = 1;
  std::string recompute_budget;  // "256MiB": choose segments for the planned peak to fit
  // Mixed precision.
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  double init_loss_scale = 65536.0;
  int64_t loss_scale_interval = 2000;
  bool keep_denormals = false;  // IEEE denormals in the training graph (default: flushed)
  // Optimizer and learning-rate schedule.
  std::string optimizer = "adamw";
  double lr = 1e-3, momentum = 0, weight_decay = 0, eps = 1e-8;
  bool nesterov = false;
  std::vector<double> betas = {0.9, 0.999};
  std::string schedule = "constant";
  int64_t warmup = 0, step_size = 1;
  double gamma = 0.1, min_lr = 0;
  // The loop.
  int64_t epochs = 1, batch = 32, accumulate = 1;
  double clip_norm = 0;
  uint64_t seed = 0;
  int threads = 0;
  bool shuffle = true;
  // Outputs.
  std::string checkpoint_dir, resume, export_path, metrics, plot, config, profile;
  int64_t checkpoint_every = 0;
  bool no_progress = false;
  bool data_parallel = false;  // demand mpirun (data parallelism is automatic under it)
  double first_bucket_kb = 1024, bucket_kb = 25 * 1024;  // gradient buckets (data parallel)
};

/// Applies the JSON object in `file` (no-op when empty) to `app`'s options that the command
/// line left unset, running their checks. CLI11 2.1 reads config files for the top-level app
/// only, hence this. onyx::Error "[train] --config ..." for bad JSON, unknown keys or values.
void apply_config_file(CLI::App* app, const std::string& file);

/// Declares the options on the `train` subcommand (with range and choice checks, so a bad
/// value fails with one line naming the option) and --config FILE.json (see apply_config_file).
void add_train_options(CLI::App* app, TrainOptions& o);

/// "model.onnx" -> "model.trained.onnx".
std::string default_export_path(const std::string& model);

/// The TrainingConfig for a run of `total_steps` optimizer steps (linear and cosine schedules
/// decay over them). onyx::Error "[train] ..." for combinations the option checks cannot see
/// (--nesterov without --momentum, a warm-up as long as the run, --checkpoint-every without
/// --checkpoint-dir).
TrainingConfig training_config(const TrainOptions& o, int64_t total_steps);
/// "REGEX:lr=R,weight_decay=W" (either key optional) as a ParamGroup; onyx::Error naming the
/// spec otherwise.
ParamGroup parse_param_group(const std::string& spec);
/// "268435456", "256MiB", "256 MiB", "1.5GiB", "512M" (K/M/G/T and KiB/MiB/GiB/TiB: powers of
/// 1024; kB/KB/MB/GB/TB: powers of 1000; B or nothing: bytes) as bytes; onyx::Error naming
/// `flag` for anything else or a size below 1 byte.
int64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace onyx::cli
