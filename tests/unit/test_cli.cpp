// The `onyx` command line, run as a process: run (against an ONNX backend case's expected
// output), inspect, bench, and the one-line errors with a non-zero exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/onnx_io.h"
#include "launcher/npy.h"
#include "test_util.h"

namespace onyx {
namespace {

namespace fs = std::filesystem;

/// The built `onyx` binary: ONYX_CLI_PATH (from CMake), $ONYX_CLI, or build/launcher/onyx
/// next to this test binary's build/tests/unit/.
std::string onyx_binary() {
#ifdef ONYX_CLI_PATH
  return ONYX_CLI_PATH;
#else
  if (const char* env = std::getenv("ONYX_CLI"); env && *env) return env;
  return (fs::read_symlink("/proc/self/exe").parent_path() / "../../launcher/onyx")
      .lexically_normal()
      .string();
#endif
}

struct Result {
  int code = -1;
  std::string out, err;
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("onyx_test_cli_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(fs::exists(onyx_binary())) << "build the `onyx` target first: " << onyx_binary();
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Runs `onyx ARGS` (already shell-quoted), capturing stdout, stderr and the exit code.
  Result onyx(const std::string& args) {
    std::string cmd =
        fmt::format("{} {} >{} 2>{}", quote(onyx_binary()), args, quote((dir_ / "stdout").string()),
                    quote((dir_ / "stderr").string()));
    int status = std::system(cmd.c_str());
    Result r;
    EXPECT_TRUE(WIFEXITED(status)) << "onyx died: " << cmd;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_text(dir_ / "stdout");
    r.err = read_text(dir_ / "stderr");
    return r;
  }

  /// Expects a failure reported as one "onyx: error: ..." line holding `part`.
  void expect_one_line_error(const Result& r, const std::string& part) {
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(r.err.rfind("onyx: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  }

  /// x: float [batch, 3] -> Relu -> "block/relu:0", plus an unused 3x4 initializer.
  std::string relu_model() {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(3)});
    b.initializer("w", Tensor::zeros(DataType::Float, {3, 4}));
    b.node("Relu", {"x"}, {"block/relu:0"});
    b.output("block/relu:0");
    auto model = b.build();
    model->producer_name = "onyx-test";
    model->graph->find_value("block/relu:0")->type =
        ValueType::tensor(DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(3)});
    std::string path = (dir_ / "relu.onnx").string();
    save_model(*model, path);
    return path;
  }

  fs::path dir_;
};

TEST_F(Cli, RunMatchesTheBackendCaseOutput) {
  fs::path test_case = fs::path(test::corpus_dir()) / "node" / "test_add";
  if (!fs::exists(test_case / "model.onnx")) GTEST_SKIP() << "no ONNX corpus at " << test_case;
  auto model = load_model((test_case / "model.onnx").string());
  std::string args = quote((test_case / "model.onnx").string());
  for (size_t i = 0; i < model->graph->inputs.size(); ++i) {
    const std::string& name = model->graph->inputs[i]->name;
    fs::path npy_path = dir_ / (name + ".npy");
    npy::save(
        load_tensor_pb((test_case / "test_data_set_0" / fmt::format("input_{}.pb", i)).string()),
        npy_path.string());
    args += " --input " + quote(name + "=" + npy_path.string());
  }
  Result r = onyx("run " + args + " --threads 2 --output-dir " + quote((dir_ / "out").string()));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& out_name = model->graph->outputs[0]->name;
  EXPECT_NE(r.out.find(out_name), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("float [3, 4, 5]"), std::string::npos) << r.out;

  Tensor got = npy::load((dir_ / "out" / (out_name + ".npy")).string());
  Tensor want = load_tensor_pb((test_case / "test_data_set_0" / "output_0.pb").string());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  test::expect_near(got, want.to_double_vector(), 1e-6);
}

TEST_F(Cli, RunRandomWithDimsWritesSlashNamesWithUnderscores) {
  std::string model = relu_model();
  fs::path out = dir_ / "out";
  Result r =
      onyx("run " + quote(model) + " --random --dim batch=5 --seed 7 -o " + quote(out.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  Tensor y = npy::load((out / "block_relu:0.npy").string());
  EXPECT_EQ(y.shape(), (Shape{5, 3}));
  for (double v : y.to_double_vector()) EXPECT_GE(v, 0.0);
  // Same seed, same inputs, same outputs.
  Result again = onyx("run " + quote(model) + " --random --dim batch=5 --seed 7 -o " +
                      quote((dir_ / "out2").string()));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(npy::load((dir_ / "out2" / "block_relu:0.npy").string()).to_double_vector(),
            y.to_double_vector());
}

TEST_F(Cli, Inspect) {
  Result r = onyx("inspect " + quote(relu_model()));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part :
       {"ir version:   10", "ai.onnx 17", "onyx-test", "inputs (1)", "tensor(float)[batch, 3]",
        "outputs (1)", "block/relu:0", "Relu  1", "12 elements, 48 B in 1 initializers"})
    EXPECT_NE(r.out.find(part), std::string::npos) << "'" << part << "' not in:\n" << r.out;
}

TEST_F(Cli, Bench) {
  Result r = onyx("bench " + quote(relu_model()) + " --batch 4 --iters 5 --warmup 1 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* part : {"input x: float[4, 3]", "p50", "p90", "p99", "mean", "throughput"})
    EXPECT_NE(r.out.find(part), std::string::npos) << "'" << part << "' not in:\n" << r.out;
}

TEST_F(Cli, ErrorsAreOneLineAndNonZero) {
  std::string model = relu_model();
  expect_one_line_error(onyx("run " + quote(model)), "missing input 'x'");
  expect_one_line_error(onyx("run " + quote((dir_ / "nope.onnx").string())), "nope.onnx");
  expect_one_line_error(onyx("run " + quote(model) + " --bogus"), "--bogus");
  expect_one_line_error(onyx("frobnicate"), "frobnicate");

  std::string doubles = (dir_ / "x64.npy").string();
  npy::save(Tensor::from_vector<double>({1, 3}, {1, 2, 3}), doubles);
  expect_one_line_error(onyx("run " + quote(model) + " --input " + quote("x=" + doubles)),
                        "expected float");
  expect_one_line_error(onyx("run " + quote(model) + " --input " + quote("y=" + doubles)),
                        "no input 'y'");
  std::string not_a_model = (dir_ / "garbage.onnx").string();
  std::ofstream(not_a_model) << "this is not a protobuf";
  expect_one_line_error(onyx("inspect " + quote(not_a_model)), "garbage.onnx");
}

TEST_F(Cli, VersionAndHelp) {
  Result v = onyx("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("onyx ", 0), 0u) << v.out;
  Result h = onyx("--help");
  EXPECT_EQ(h.code, 0);
  for (const char* cmd : {"run", "inspect", "bench"})
    EXPECT_NE(h.out.find(cmd), std::string::npos) << h.out;
}

}  // namespace
}  // namespace onyx
