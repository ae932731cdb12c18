// The `onyx` command line: parses, dispatches to one subcommand, and turns every error into
// one line on stderr and a non-zero exit code.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "graph/error.h"
#include "launcher/commands.h"

namespace {

/// Error messages can span lines (e.g. a nested error); the command line prints one.
std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

int fail(const std::string& message) {
  std::cerr << "onyx: error: " << one_line(message) << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace onyx::cli;
  CLI::App app{"onyx: run and train ONNX models on CPU", "onyx"};
  app.set_version_flag("-V,--version", "onyx " ONYX_VERSION_STRING);
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("onyx: error: {} (see onyx --help)\n", one_line(e.what()));
  });
  CommonOptions common;
  app.add_option("--log-level", common.log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  // One file per command; `launch` joins here.
  std::vector<Command> commands = {add_run_command(app, common), add_inspect_command(app, common),
                                   add_bench_command(app, common), add_train_command(app, common),
                                   add_launch_command(app, common), add_ops_command(app, common),
                                   add_gradcheck_command(app, common)};
  // CLI11 would only say a subcommand is required; name the word it did not know.
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](CLI::App* c) { return c->get_name() == argv[1]; }).empty()) {
    std::vector<std::string> names;
    for (const auto& cmd : commands) names.push_back(cmd.app->get_name());
    return fail(fmt::format("unknown command '{}' (commands: {}; see onyx --help)", argv[1],
                            fmt::join(names, ", ")));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    auto logger = spdlog::stderr_color_mt("onyx");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::from_str(common.log_level));
    for (const auto& cmd : commands)
      if (cmd.app->parsed()) return cmd.run();
    return fail("no command given");
  } catch (const onyx::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return fail("internal error (unknown exception)");
  }
}
