// `onyx launch` host specs: the first byte picks --hosts (the rest as the host list) or
// --hostfile (the rest as the file's contents) and the rank count; cli::mpirun_argv parses
// and checks them (a launch agent is set, so no host name is resolved through DNS).
// Seeds: tests/fuzz/seeds/launch.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "launcher/mpirun_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string text(onyx::fuzz::bytes_of(data + 1, size - 1));
  onyx::cli::LaunchOptions o;
  o.ranks = 1 + (data[0] >> 1);
  o.launch_agent = "true";
  o.command = {"onyx", "train", "model.onnx"};
  if (data[0] & 1)
    o.hostfile = onyx::fuzz::write_scratch(text, ".hostfile");
  else
    o.hosts = text;
  try {
    std::vector<std::string> argv = onyx::cli::mpirun_argv(o, "mpirun", "/bin/onyx", true);
    if (argv.empty() || argv[0] != "mpirun") std::abort();
  } catch (const onyx::Error&) {
  }
  return 0;
}
