#include "launcher/train_options.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "autodiff/loss.h"
#include "graph/error.h"

namespace onyx::cli {

namespace {

/// A JSON value as CLI11 option text.
std::string option_text(const std::string& file, const std::string& key, const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  ONYX_THROW(
      "[train] --config '{}': the value of \"{}\" should be a string, number or boolean, "
      "found {}",
      file, key, v.type_name());
}

}  // namespace

void apply_config_file(CLI::App* app, const std::string& file) {
  if (file.empty()) return;
  std::ifstream in(file);
  ONYX_CHECK(in.good(), "[train] --config: cannot read '{}'", file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    ONYX_THROW("[train] --config '{}' is not valid JSON: {}", file, e.what());
  }
  ONYX_CHECK(j.is_object(),
             "[train] --config '{}': expected an object of option names and "
             "values, found {}",
             file, j.type_name());
  for (const auto& [key, value] : j.items()) {
    CLI::Option* op =
        key == "config" || key == "help" ? nullptr : app->get_option_no_throw("--" + key);
    ONYX_CHECK(op != nullptr,
               "[train] --config '{}': unknown key \"{}\" (keys are the long "
               "option names without dashes, e.g. \"lr\"; see onyx train --help)",
               file, key);
    if (op->count() > 0) continue;  // the command line wins
    std::vector<std::string> texts;
    if (value.is_array())
      for (const auto& v : value) texts.push_back(option_text(file, key, v));
    else
      texts.push_back(option_text(file, key, value));
    try {
      if (op->get_expected_min() == 0) {
        ONYX_CHECK(texts.size() == 1,
                   "[train] --config '{}': \"{}\" is a flag; give true or "
                   "false",
                   file, key);
        op->add_result(op->get_flag_value(key, texts[0]));
      } else {
        op->add_result(texts);
      }
      op->run_callback();
    } catch (const CLI::Error& e) {
      ONYX_THROW("[train] --config '{}': \"{}\": {}", file, key, e.what());
    }
  }
}

void add_train_options(CLI::App* app, TrainOptions& o) {
  app->add_option("--config", o.config,
                  "Read options from a JSON file (keys: the long option "
                  "names); command-line options override it")
      ->check(CLI::ExistingFile);

  app->add_option("model", o.model, "ONNX model to train")->required()->check(CLI::ExistingFile);
  app->add_option("--data", o.data,
                  "Folder with one .npy per batch input (labels.npy, x.npy, ...); required");
  app->add_option("--val-data", o.val_data,
                  "Held-out folder of the same form, evaluated after "
                  "every epoch (loss, and accuracy for classification)");

  const std::string loss_group = "Loss";
  app->add_option("--loss", o.loss, "Loss kind")
      ->capture_default_str()
      ->check(CLI::IsMember(autodiff::loss_kinds()))
      ->group(loss_group);
  app->add_option("--loss-output", o.loss_output, "Model output the loss reads (default: first)")
      ->group(loss_group);
  app->add_option("--labels", o.labels, "Name of the labels input (and of its .npy file)")
      ->capture_default_str()
      ->group(loss_group);
  app->add_option("--class-axis", o.class_axis,
                  "Cross-entropy/NLL: the scores' class axis, 1 for [N, C, ...] (ONNX, torch) or "
                  "-1 for language-model logits [N, S, C]")
      ->capture_default_str()
      ->group(loss_group);

  const std::string opt_group = "Optimizer";
  app->add_option("--optimizer", o.optimizer, "Optimizer")
      ->capture_default_str()
      ->transform(CLI::IsMember({"sgd", "adam", "adamw", "lamb"}, CLI::ignore_case))
      ->group(opt_group);
  app->add_option("--lr", o.lr, "Base learning rate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(opt_group);
  app->add_option("--momentum", o.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(opt_group);
  app->add_flag("--nesterov", o.nesterov, "Nesterov momentum (SGD)")->group(opt_group);
  app->add_option("--weight-decay", o.weight_decay,
                  "Weight decay (decoupled for adamw/lamb, L2 for sgd/adam)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(opt_group);
  app->add_flag("--decay-1d", o.decay_1d,
                "Weight decay on 1-D parameters (biases, norm scales) too, as torch.optim does "
                "(default: not)")
      ->group(opt_group);
  app->add_option("--param-group", o.param_groups,
                  "REGEX:lr=R,weight_decay=W: parameters whose names match take this base rate "
                  "and/or decay (repeatable; the first match wins)")
      ->group(opt_group);
  app->add_option("--freeze", o.freeze,
                  "REGEX: parameters whose names match are not trained (repeatable)")
      ->group(opt_group);
  app->add_option("--recompute", o.recompute,
                  "REGEX over forward node names: recompute those activations in backward (one "
                  "segment per distinct match, e.g. '^/h\\.\\d+/' per block); less memory")
      ->group(opt_group);
  app->add_option("--recompute-budget", o.recompute_budget,
                  "SIZE (e.g. 256MiB): recompute as few segments as needed (largest first; the "
                  "--recompute segments, else the blocks between the forward graph's cut points) "
                  "for the planned peak activation memory of the first batch to fit")
      ->group(opt_group);
  app->add_option("--recompute-every", o.recompute_every,
                  "Recompute only every K-th segment")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(opt_group);
  app->add_option("--betas", o.betas, "Adam/AdamW/LAMB betas: BETA1 BETA2")
      ->expected(2)
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group(opt_group);
  app->add_option("--eps", o.eps, "Adam/AdamW/LAMB epsilon")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(opt_group);
  app->add_option("--clip-norm", o.clip_norm, "Clip gradients to this global L2 norm (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(opt_group);

  const std::string amp_group = "Mixed precision";
  app->add_option("--precision", o.precision,
                  "fp32, or bf16/fp16: matrix products and convolutions in that format, softmax, "
                  "norms, reductions and the loss in float32, weights and optimizer in float32")
      ->capture_default_str()
      ->transform(CLI::IsMember({"fp32", "bf16", "fp16"}, CLI::ignore_case))
      ->group(amp_group);
  app->add_flag("--keep-denormals", o.keep_denormals,
                "Keep denormal floats in the training graph's arithmetic (by default they are "
                "read and written as zero: on Intel CPUs each operation on one takes ~100x its "
                "time)")
      ->group(amp_group);
  app->add_option("--init-loss-scale", o.init_loss_scale,
                  "fp16: the dynamic loss scale to start from (as torch.amp.GradScaler)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(amp_group);
  app->add_option("--loss-scale-interval", o.loss_scale_interval,
                  "fp16: clean steps in a row before the loss scale doubles")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->group(amp_group);

  const std::string lr_group = "Learning-rate schedule";
  app->add_option("--schedule", o.schedule, "Schedule after the warm-up")
      ->capture_default_str()
      ->transform(CLI::IsMember({"constant", "linear", "cosine", "step"}, CLI::ignore_case))
      ->group(lr_group);
  app->add_option("--warmup", o.warmup, "Linear warm-up over this many optimizer steps")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(lr_group);
  app->add_option("--min-lr", o.min_lr, "Rate at the end of a linear or cosine decay")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(lr_group);
  app->add_option("--step-size", o.step_size, "step schedule: multiply by --gamma every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(lr_group);
  app->add_option("--gamma", o.gamma, "step schedule: factor")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(lr_group);

  const std::string loop_group = "Loop";
  app->add_option("--epochs", o.epochs, "Passes over the training data")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->group(loop_group);
  app->add_option("--batch", o.batch, "Samples per micro-batch")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->group(loop_group);
  app->add_option("--accumulate", o.accumulate, "Micro-batches per optimizer step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->group(loop_group);
  app->add_flag("--shuffle,!--no-shuffle", o.shuffle,
                "Visit samples in a seeded random order, new each epoch (default on)")
      ->group(loop_group);
  app->add_option("--seed", o.seed, "Seed for shuffling and Dropout")
      ->capture_default_str()
      ->group(loop_group);
  app->add_option("-t,--threads", o.threads, "Intra-op threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20))
      ->group(loop_group);
  app->add_option("--first-bucket-kb", o.first_bucket_kb,
                  "Data parallel: size of the first gradient bucket (starts communication early)");
  app->add_option("--bucket-kb", o.bucket_kb, "Data parallel: size cap of the other gradient buckets");
  app->add_flag("--data-parallel", o.data_parallel,
                "Require data-parallel training (start with `onyx launch -n N -- onyx train ...`; "
                "under mpirun it is on by default)");
  app->add_flag("--no-progress", o.no_progress, "No progress bar (it only shows on a terminal)")
      ->group(loop_group);

  const std::string out_group = "Outputs";
  app->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "Write checkpoints DIR/step-<N>.onyx (and one at the end)")
      ->group(out_group);
  app->add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N optimizer steps")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(out_group);
  app->add_option("--resume", o.resume,
                  "Continue from a checkpoint file, or the newest one in a folder")
      ->check(CLI::ExistingPath)
      ->group(out_group);
  app->add_option("-o,--export", o.export_path,
                  "Trained inference model to write (default: MODEL.trained.onnx)")
      ->group(out_group);
  app->add_option("--metrics", o.metrics, "Write one JSON object per step and per epoch (JSONL)")
      ->group(out_group);
  app->add_option("--plot", o.plot, "Draw the loss curve into a PNG file")->group(out_group);
  app->add_option("--profile", o.profile,
                  "Write a Chrome-trace profile of the training graph's runs (rank 0) to FILE")
      ->group(out_group);
}

std::string default_export_path(const std::string& model) {
  std::string stem = model;
  if (stem.size() > 5 && stem.ends_with(".onnx")) stem.resize(stem.size() - 5);
  return stem + ".trained.onnx";
}

ParamGroup parse_param_group(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  ONYX_CHECK(colon != std::string::npos && colon > 0,
             "[train] --param-group '{}': expected REGEX:lr=R,weight_decay=W", spec);
  ParamGroup g;
  g.match = spec.substr(0, colon);
  std::string rest = spec.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(start, end - start);
    const size_t eq = item.find('=');
    ONYX_CHECK(eq != std::string::npos,
               "[train] --param-group '{}': '{}' should be lr=R or weight_decay=W", spec, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(value, &used);
      ONYX_CHECK(used == value.size(), "trailing text");
    } catch (const std::exception&) {
      ONYX_THROW("[train] --param-group '{}': '{}' is not a number", spec, value);
    }
    ONYX_CHECK(std::isfinite(v) && v >= 0,
               "[train] --param-group '{}': {} should be finite and >= 0 but is {}", spec, key, v);
    if (key == "lr") g.lr = v;
    else if (key == "weight_decay" || key == "weight-decay") g.weight_decay = v;
    else ONYX_THROW("[train] --param-group '{}': unknown key '{}' (lr, weight_decay)", spec, key);
    start = end + 1;
  }
  return g;
}

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  static const std::map<std::string, double> units = {
      {"", 1},          {"B", 1},           {"K", 1024.0},    {"KiB", 1024.0},
      {"M", 1048576.0}, {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GiB", 1073741824.0},
      {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"kB", 1e3}, {"KB", 1e3},
      {"MB", 1e6},      {"GB", 1e9},        {"TB", 1e12}};
  double number = 0;
  size_t used = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  auto it = used > 0 ? units.find(unit) : units.end();
  ONYX_CHECK(it != units.end() && std::isfinite(number),
             "[train] {} '{}' is not a size: expected a number of bytes with an optional unit "
             "(B, KiB, MiB, GiB, TiB or K, M, G, T; kB, MB, GB, TB), e.g. 256MiB", flag, text);
  const double bytes = number * it->second;
  ONYX_CHECK(bytes >= 1 && bytes < 9.2e18, "[train] {} '{}' should be at least 1 byte", flag, text);
  return static_cast<int64_t>(bytes);
}

TrainingConfig training_config(const TrainOptions& o, int64_t total_steps) {
  ONYX_CHECK(!o.nesterov || o.momentum > 0, "[train] --nesterov needs --momentum > 0");
  ONYX_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(),
             "[train] --checkpoint-every {} needs --checkpoint-dir", o.checkpoint_every);
  bool decays = o.schedule == "linear" || o.schedule == "cosine";
  ONYX_CHECK(!decays || o.warmup < total_steps,
             "[train] --schedule {} decays after the warm-up, but --warmup {} is not below the "
             "run's {} optimizer steps (epochs x batches per epoch / --accumulate)",
             o.schedule, o.warmup, total_steps);
  ONYX_CHECK(!decays || o.min_lr <= o.lr, "[train] --min-lr {} is above --lr {}", o.min_lr, o.lr);
  TrainingConfig c;
  c.loss.kind = o.loss;
  c.loss.output = o.loss_output;
  c.loss.labels = o.labels;
  c.loss.class_axis = o.class_axis;
  c.optimizer.name = o.optimizer;
  c.optimizer.lr = o.lr;
  c.optimizer.momentum = o.momentum;
  c.optimizer.nesterov = o.nesterov;
  c.optimizer.weight_decay = o.weight_decay;
  c.optimizer.beta1 = o.betas.at(0);
  c.optimizer.beta2 = o.betas.at(1);
  c.optimizer.eps = o.eps;
  c.schedule.kind = o.schedule;
  c.schedule.warmup_steps = o.warmup;
  c.schedule.total_steps = total_steps;
  c.schedule.step_size = o.step_size;
  c.schedule.gamma = o.gamma;
  c.schedule.min_lr = o.min_lr;
  c.accumulation_steps = static_cast<int>(o.accumulate);
  c.clip_norm = o.clip_norm;
  c.seed = o.seed;
  c.threads = o.threads;
  c.decay_1d = o.decay_1d;
  c.freeze = o.freeze;
  c.recompute = {.pattern = o.recompute, .every = o.recompute_every};
  if (!o.recompute_budget.empty())
    c.recompute.budget_bytes = parse_byte_size(o.recompute_budget, "--recompute-budget");
  for (const auto& spec : o.param_groups) c.param_groups.push_back(parse_param_group(spec));
  c.precision = parse_precision(o.precision);
  c.loss_scaler.init_scale = o.init_loss_scale;
  c.loss_scaler.growth_interval = o.loss_scale_interval;
  c.flush_denormals = !o.keep_denormals;
  return c;
}

}  // namespace onyx::cli
