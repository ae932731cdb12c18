// `onyx train --config FILE.json`: the bytes as the config file -> cli::apply_config_file
// over the train subcommand's declared options -> cli::training_config (the checks the
// option parser cannot see: schedules, warm-up, param groups, recompute budgets).
// Seeds: tests/fuzz/seeds/train_config.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "launcher/train_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = onyx::fuzz::write_scratch(onyx::fuzz::bytes_of(data, size), ".json");
  CLI::App app;
  CLI::App* train = app.add_subcommand("train");
  onyx::cli::TrainOptions o;
  onyx::cli::add_train_options(train, o);
  try {
    onyx::cli::apply_config_file(train, path);
    for (const std::string& g : o.param_groups) onyx::cli::parse_param_group(g);
    if (!o.recompute_budget.empty()) onyx::cli::parse_byte_size(o.recompute_budget, "--recompute-budget");
    onyx::cli::training_config(o, 1000);
  } catch (const onyx::Error&) {
  }
  return 0;
}
