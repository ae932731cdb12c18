// `onyx launch`'s host specs and the mpirun command line built from them
// (launcher/mpirun_command.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "graph/error.h"
#include "launcher/mpirun_command.h"

namespace onyx::cli {
namespace {

LaunchOptions options(int ranks) {
  LaunchOptions o;
  o.ranks = ranks;
  o.launch_agent = "true";  // no DNS lookups in a unit test
  o.command = {"onyx", "train", "m.onnx"};
  return o;
}

std::string error_of(const LaunchOptions& o) {
  try {
    mpirun_argv(o, "mpirun", "/bin/onyx", false);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class Hostfile {
 public:
  explicit Hostfile(const std::string& text)
      : path_((std::filesystem::temp_directory_path() / ("onyx_hostfile_" + std::to_string(::getpid()))).string()) {
    std::ofstream(path_) << text;
  }
  ~Hostfile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(MpirunCommand, HostListsAreParsedAndCountedAgainstTheRanks) {
  LaunchOptions o = options(5);
  o.hosts = "h1:2,h2:3";
  std::vector<std::string> argv = mpirun_argv(o, "mpirun", "/bin/onyx", false);
  EXPECT_TRUE(has(argv, "h1:2,h2:3"));
  EXPECT_TRUE(has(argv, "/bin/onyx"));  // a leading "onyx" runs this very binary
  o.ranks = 6;
  EXPECT_NE(error_of(o).find("6 ranks asked for but the hosts offer 5 slots"), std::string::npos) << error_of(o);
  o.ranks = 1;
  for (const char* bad : {"h1:", ":2", "h1:0", "h1:x", "h1,,h2", "h 1", "h1:2:3", "h1:99999999999999999999"}) {
    o.hosts = bad;
    EXPECT_NE(error_of(o).find("[launch]"), std::string::npos) << bad << ": " << error_of(o);
  }
}

// Found while writing tests/fuzz/fuzz_launch.cpp: two hosts of 2147483647 slots summed to -2
// ("the hosts offer -2 slots"), and a 100,000-character host name crashed `onyx launch` with a
// stack overflow inside std::regex.
TEST(MpirunCommand, HugeSlotCountsAndLongListsAreErrorsNotCrashes) {
  LaunchOptions o = options(1);
  o.hosts = "a:2147483647,b:2147483647";
  EXPECT_NE(error_of(o).find("slots 1 to"), std::string::npos) << error_of(o);
  o.hosts = "h1:1048576,h2:1048576";
  o.ranks = 2097152;
  EXPECT_EQ(error_of(o), "(accepted)");
  o.ranks = 1;
  o.hosts = std::string(200000, 'a');
  EXPECT_EQ(error_of(o), "(accepted)");
  o.hosts = std::string(200000, 'a') + "!";
  EXPECT_NE(error_of(o).find("bad host"), std::string::npos);
  o.hosts.clear();
  Hostfile long_line(std::string(200000, 'h') + " slots=2\n" + std::string(100000, ' ') + "x y\n");
  o.hostfile = long_line.path();
  EXPECT_NE(error_of(o).find("line 2"), std::string::npos) << error_of(o).substr(0, 300);
}

TEST(MpirunCommand, HostfilesFollowOpenMpiSyntax) {
  LaunchOptions o = options(7);
  Hostfile good("# cluster\nh1 slots=2\n  h2   slots = 3 max_slots=4  # comment\r\n\nh3\nh4 max_slots=2\n");
  o.hostfile = good.path();
  std::vector<std::string> argv = mpirun_argv(o, "mpirun", "/bin/onyx", false);
  EXPECT_TRUE(has(argv, "--hostfile"));
  o.ranks = 8;
  EXPECT_NE(error_of(o).find("offer 7 slots"), std::string::npos) << error_of(o);
  o.ranks = 1;
  for (const char* bad : {"h1 slots=0\n", "h1 slots=\n", "h1 slots=2 slots=3\n", "h1slots=2\n", "h1 cpus=2\n",
                          "h1 max_slots=2 slots=1\n", "# nothing\n\n"}) {
    Hostfile f(bad);
    o.hostfile = f.path();
    EXPECT_NE(error_of(o).find("[launch] hostfile"), std::string::npos) << bad << ": " << error_of(o);
  }
  o.hostfile = "/nonexistent/hostfile";
  EXPECT_NE(error_of(o).find("cannot read hostfile"), std::string::npos);
}

}  // namespace
}  // namespace onyx::cli
