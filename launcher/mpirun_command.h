// Building the `mpirun` command line that `onyx launch` runs: Open MPI flags for running as
// root, oversubscribed small machines, host lists or hostfiles, the environment ranks need,
// and an optional remote agent (e.g. a script entering a network namespace instead of ssh).
#pragma once

#include <string>
#include <vector>

namespace onyx::cli {

struct LaunchOptions {
  int ranks = 1;                        // -n
  std::string hosts;                    // "h1:2,h2:2" (host:slots)
  std::string hostfile;                 // Open MPI hostfile ("host slots=N" lines)
  std::string launch_agent;             // replaces ssh (mpirun --mca plm_rsh_agent)
  std::vector<std::string> export_env;  // extra variables to export to every rank
  bool bind = false;                    // bind ranks to cores (off: let OpenMP spread)
  std::vector<std::string> mpirun_args; // passed to mpirun as given (e.g. "--mca btl tcp,self")
  std::vector<std::string> command;     // what each rank runs ("onyx train ...")
};

/// Checks the options (ranks >= 1, host list syntax, the hostfile exists and parses, enough
/// slots for the ranks, hosts resolve unless a launch agent is given, a command is given)
/// and returns mpirun's argv. `self` replaces a leading "onyx" in the command so every rank
/// runs this very binary. onyx::Error naming what is wrong.
std::vector<std::string> mpirun_argv(const LaunchOptions& o, const std::string& mpirun,
                                     const std::string& self, bool as_root);

/// A shell-quoted rendering of argv, for printing the exact command.
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace onyx::cli
