// Tests that run the built `onyx` binary as a process: one temporary folder per test, the exit
// code with captured stdout/stderr, and the check that an error is one "onyx: error:" line.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "graph/error.h"

namespace onyx::test {

/// The built `onyx` binary: ONYX_CLI_PATH (from CMake), $ONYX_CLI, or build/launcher/onyx
/// next to this test binary's build/tests/unit/.
inline std::string onyx_binary() {
#ifdef ONYX_CLI_PATH
  return ONYX_CLI_PATH;
#else
  if (const char* env = std::getenv("ONYX_CLI"); env && *env) return env;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "../../launcher/onyx")
      .lexically_normal()
      .string();
#endif
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// `s` single-quoted for the shell.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

class CliProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("onyx_test_{}_{}_{}", info->test_suite_name(), getpid(), info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(std::filesystem::exists(onyx_binary()))
        << "build the `onyx` target first: " << onyx_binary();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Runs `onyx ARGS` (already shell-quoted), capturing stdout, stderr and the exit code.
  CliResult onyx(const std::string& args) {
    std::string cmd =
        fmt::format("{} {} >{} 2>{}", quote(onyx_binary()), args, quote((dir_ / "stdout").string()),
                    quote((dir_ / "stderr").string()));
    int status = std::system(cmd.c_str());
    CliResult r;
    EXPECT_TRUE(WIFEXITED(status)) << "onyx died: " << cmd;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_text(dir_ / "stdout");
    r.err = read_text(dir_ / "stderr");
    return r;
  }

  /// Expects a failure reported as one "onyx: error: ..." line holding `part`.
  void expect_one_line_error(const CliResult& r, const std::string& part) {
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("onyx: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << "'" << part << "' not in: " << r.err;
  }

  std::filesystem::path dir_;
};

}  // namespace onyx::test
