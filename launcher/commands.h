// The `onyx` subcommands. Each file cmd_<name>.cpp adds one subcommand to the CLI11 app and
// returns what to run once the command line is parsed; main.cpp dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace onyx::cli {

/// Options shared by every subcommand.
struct CommonOptions {
  std::string log_level = "warn";  // trace, debug, info, warn, error, off
};

/// --precision fp32|bf16|fp16 of the commands that build an inference session.
CLI::Option* add_precision_option(CLI::App* app, std::string& precision);
/// --no-winograd: SessionOptions::winograd_convolutions off (direct convolutions everywhere).
CLI::Option* add_winograd_option(CLI::App* app, bool& no_winograd);
CLI::Option* add_flush_denormals_option(CLI::App* app, bool& flush);

/// --provider LIST and --device N of the commands that build an inference session.
struct ProviderOptions {
  std::string providers = "cpu";  // comma-separated, priority order: "cuda" or "cuda,cpu"
  int device = 0;
};
void add_provider_options(CLI::App* app, ProviderOptions& o);
/// Sets SessionOptions::providers and device_id from the flags.
void apply_provider_options(const ProviderOptions& o, std::vector<std::string>& providers, int& device_id);

/// A registered subcommand: its CLI11 app and its body (returns the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// onyx run MODEL [--input NAME=FILE.npy ...] [--random] ...: run once, write outputs.
Command add_run_command(CLI::App& parent, const CommonOptions& common);
/// onyx inspect MODEL: inputs, outputs, ops, opsets, producer, parameters.
Command add_inspect_command(CLI::App& parent, const CommonOptions& common);
/// onyx bench MODEL [--batch B] [--iters N] ...: latency percentiles and throughput.
Command add_bench_command(CLI::App& parent, const CommonOptions& common);
/// onyx train MODEL --data DIR [...]: train on .npy data, export the trained model.
Command add_train_command(CLI::App& parent, const CommonOptions& common);
/// onyx launch -n N [--hosts ... | --hostfile F] -- onyx train ...: mpirun wrapper.
Command add_launch_command(CLI::App& parent, const CommonOptions& common);
/// onyx ops [--provider P] [--domain D] [--gradients] [--json]: the op support matrix.
Command add_ops_command(CLI::App& parent, const CommonOptions& common);
/// onyx gradcheck MODEL [--ops] [--input ...]: missing gradient rules, then FD-checked gradients.
Command add_gradcheck_command(CLI::App& parent, const CommonOptions& common);

}  // namespace onyx::cli
