// onyx launch: run a command on N ranks through Open MPI's mpirun, printing the exact
// mpirun command first. `onyx train` under mpirun trains data-parallel.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <filesystem>

#include "graph/error.h"
#include "launcher/commands.h"
#include "launcher/mpirun_command.h"

namespace onyx::cli {

namespace {

/// mpirun from $ONYX_MPIRUN or PATH.
std::string find_mpirun() {
  if (const char* e = std::getenv("ONYX_MPIRUN"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::filesystem::path cand = std::filesystem::path(dir.empty() ? "." : dir) / "mpirun";
    if (::access(cand.c_str(), X_OK) == 0) return cand.string();
    if (end == std::string::npos) break;
    start = end + 1;
  }
  ONYX_THROW("[launch] mpirun was not found on PATH; install Open MPI (Debian: apt-get install openmpi-bin)");
}

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "onyx";
}

}  // namespace

Command add_launch_command(CLI::App& parent, const CommonOptions& common) {
  auto* app = parent.add_subcommand("launch", "Run a command on N ranks with mpirun (data-parallel training)");
  auto o = std::make_shared<LaunchOptions>();
  auto dry = std::make_shared<bool>(false);
  app->add_option("-n,--ranks", o->ranks, "Number of ranks (processes)")->required();
  app->add_option("--hosts", o->hosts, "Hosts and slots: h1:2,h2:2 (default: this machine)");
  app->add_option("--hostfile", o->hostfile, "Open MPI hostfile ('host slots=N' lines)");
  app->add_option("--launch-agent", o->launch_agent,
                  "Program mpirun uses instead of ssh to start remote daemons");
  app->add_option("-x,--export", o->export_env, "Extra environment variable to pass to every rank");
  app->add_flag("--bind", o->bind, "Bind each rank to cores (default: no binding)");
  app->add_option("--mpirun-arg", o->mpirun_args, "Extra mpirun arguments, e.g. '--mca btl tcp,self'");
  app->add_flag("--dry-run", *dry, "Print the mpirun command without running it");
  app->add_option("command", o->command, "The command each rank runs, after --")->required();
  app->positionals_at_end();
  return {app, [o, dry]() {
            std::vector<std::string> argv = mpirun_argv(*o, find_mpirun(), self_path(), ::geteuid() == 0);
            fmt::print("onyx launch: {}\n", shell_join(argv));
            std::fflush(stdout);
            if (*dry) return 0;
            std::vector<char*> cargv;
            for (auto& a : argv) cargv.push_back(a.data());
            cargv.push_back(nullptr);
            ::execv(argv[0].c_str(), cargv.data());
            ONYX_THROW("[launch] could not start '{}': {}", argv[0], std::strerror(errno));
          }};
}

}  // namespace onyx::cli
