// The `onyx` command line, run as a process: run (against an ONNX backend case's expected
// output; sequences and optionals), inspect, bench, and the one-line errors with a non-zero exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/onnx_io.h"
#include "launcher/npy.h"
#include "cli_process.h"
#include "test_util.h"

namespace onyx {
namespace {

namespace fs = std::filesystem;

using test::CliProcessTest;
using Result = test::CliResult;
using test::quote;
using test::read_text;
using test::onyx_binary;

class Cli : public CliProcessTest {
 protected:
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

  /// A sequence input `seq` of float tensors and an optional float input `opt`: outputs
  /// n = length of seq, grown = seq with [7, 8] appended, has = whether opt holds a tensor.
  std::string sequence_model() {
    test::ModelBuilder b(18);
    b.input("seq", DataType::Float, Shape{});
    b.input("opt", DataType::Float, Shape{});
    b.initializer("tail", Tensor::from_vector<float>({2}, {7, 8}));
    b.node("SequenceLength", {"seq"}, {"n"});
    b.node("SequenceInsert", {"seq", "tail"}, {"grown"});
    b.node("OptionalHasElement", {"opt"}, {"has"});
    b.output("n").output("grown").output("has");
    auto model = b.build();
    auto float_tensor = std::make_shared<ValueType>(ValueType::tensor(DataType::Float));
    ValueType seq, opt;
    seq.kind = ValueType::Kind::Sequence, seq.inner = float_tensor;
    opt.kind = ValueType::Kind::Optional, opt.inner = float_tensor;
    model->graph->find_value("seq")->type = seq;
    model->graph->find_value("opt")->type = opt;
    model->graph->find_value("grown")->type = seq;
    model->graph->find_value("n")->type = ValueType::tensor(DataType::Int64, SymShape{});
    model->graph->find_value("has")->type = ValueType::tensor(DataType::Bool, SymShape{});
    std::string path = (dir_ / "sequence.onnx").string();
    save_model(*model, path);
    return path;
  }
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

TEST_F(Cli, RunWithoutWinogradGivesTheDirectConvolutionsResult) {
  // Two 3x3 stride-1 convolutions of 32 channels: Winograd's where the CPU has it (AVX-512).
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, {1, 32, 12, 12});
  std::string in = "x";
  for (int i = 0; i < 2; ++i) {
    std::vector<double> w(32 * 32 * 9);
    for (size_t j = 0; j < w.size(); ++j) w[j] = std::sin(0.37 * double(j + i)) * 0.08;
    const std::string name = fmt::format("c{}", i);
    b.initializer(name + "_w", test::T_<float>({32, 32, 3, 3}, w));
    test::set_attrs(b.node("Conv", {in, name + "_w"}, {name}),
                    {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("pads", {1, 1, 1, 1})});
    in = name;
  }
  b.output(in);
  std::string path = (dir_ / "convs.onnx").string();
  save_model(*b.build(), path);
  std::vector<double> outs[2];
  for (int direct = 0; direct < 2; ++direct) {
    fs::path out = dir_ / fmt::format("out{}", direct);
    Result r = onyx("run " + quote(path) + " --random --seed 3 -o " + quote(out.string()) +
                    (direct ? " --no-winograd" : ""));
    ASSERT_EQ(r.code, 0) << r.err;
    outs[direct] = npy::load((out / "c1.npy").string()).to_double_vector();
  }
  ASSERT_EQ(outs[0].size(), outs[1].size());
  for (size_t i = 0; i < outs[0].size(); ++i)
    ASSERT_NEAR(outs[0][i], outs[1][i], 1e-5 * std::max(1.0, std::abs(outs[1][i]))) << i;
  EXPECT_NE(onyx("run --help").out.find("--no-winograd"), std::string::npos);
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

// Sequences travel as folders of 0.npy, 1.npy, ... both ways; optional inputs not given are
// empty optionals.
TEST_F(Cli, RunFeedsAndWritesSequencesAndOptionals) {
  std::string model = sequence_model();
  fs::create_directories(dir_ / "seq");
  npy::save(Tensor::from_vector<float>({2}, {1, 2}), (dir_ / "seq" / "0.npy").string());
  npy::save(Tensor::from_vector<float>({3}, {3, 4, 5}), (dir_ / "seq" / "1.npy").string());
  fs::path out = dir_ / "out";
  Result r = onyx("run " + quote(model) + " --input " + quote("seq=" + (dir_ / "seq").string()) +
                  " -o " + quote(out.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("sequence of 3 tensors"), std::string::npos) << r.out;
  EXPECT_EQ(npy::load((out / "n.npy").string()).to_double_vector(), std::vector<double>{2});
  EXPECT_EQ(npy::load((out / "has.npy").string()).to_double_vector(), std::vector<double>{0});
  EXPECT_EQ(npy::load((out / "grown" / "1.npy").string()).to_double_vector(),
            (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(npy::load((out / "grown" / "2.npy").string()).to_double_vector(),
            (std::vector<double>{7, 8}));
  EXPECT_FALSE(fs::exists(out / "grown" / "3.npy"));

  // The written sequence feeds the next run as it is; a given optional holds its tensor.
  npy::save(Tensor::from_vector<float>({1}, {9}), (dir_ / "opt.npy").string());
  Result again = onyx("run " + quote(model) + " --input " + quote("seq=" + (out / "grown").string()) +
                      " --input " + quote("opt=" + (dir_ / "opt.npy").string()) + " -o " +
                      quote((dir_ / "out2").string()));
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(npy::load((dir_ / "out2" / "n.npy").string()).to_double_vector(),
            std::vector<double>{3});
  EXPECT_EQ(npy::load((dir_ / "out2" / "has.npy").string()).to_double_vector(),
            std::vector<double>{1});

  // An empty folder is an empty sequence.
  fs::create_directories(dir_ / "empty");
  Result empty = onyx("run " + quote(model) + " --input " +
                      quote("seq=" + (dir_ / "empty").string()) + " -o " +
                      quote((dir_ / "out3").string()));
  ASSERT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(npy::load((dir_ / "out3" / "n.npy").string()).to_double_vector(),
            std::vector<double>{0});
  EXPECT_TRUE(fs::exists(dir_ / "out3" / "grown" / "0.npy"));

  // A gap in the numbering, a file for the sequence, a folder for the tensor: one-line errors.
  fs::create_directories(dir_ / "gap");
  npy::save(Tensor::from_vector<float>({1}, {1}), (dir_ / "gap" / "0.npy").string());
  npy::save(Tensor::from_vector<float>({1}, {1}), (dir_ / "gap" / "2.npy").string());
  expect_one_line_error(
      onyx("run " + quote(model) + " --input " + quote("seq=" + (dir_ / "gap").string())),
      "no 1.npy");
  expect_one_line_error(
      onyx("run " + quote(model) + " --input " + quote("seq=" + (dir_ / "opt.npy").string())),
      "pass a folder");
  expect_one_line_error(onyx("run " + quote(model) + " --input " +
                             quote("seq=" + (dir_ / "seq").string()) + " --input " +
                             quote("opt=" + (dir_ / "seq").string())),
                        "a folder feeds a sequence");
  expect_one_line_error(onyx("run " + quote(model)), "missing input 'seq'");
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
