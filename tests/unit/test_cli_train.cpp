// `onyx train`, run as a process: a tiny softmax regression trained with SGD and checked step
// by step against a float64 reference, metrics lines, checkpoints, the export (run again with
// `onyx run`), the loss plot, --resume continuing bit-identically, --config, a full disk under
// --checkpoint-dir, and one-line errors for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "graph/onnx_io.h"
#include "launcher/loss_plot.h"
#include "launcher/npy.h"
#include "launcher/train_options.h"
#include "cli_process.h"
#include "small_disk.h"
#include "test_util.h"

namespace onyx {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSamples = 24, kFeatures = 4, kClasses = 3;

std::vector<nlohmann::json> read_jsonl(const fs::path& p) {
  std::vector<nlohmann::json> lines;
  std::ifstream f(p);
  for (std::string line; std::getline(f, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

/// Softmax regression in float64: W [C, F] row-major, b [C].
struct Linear {
  std::vector<double> W, b;
  std::vector<double> logits(const std::vector<float>& x, int64_t n) const {
    std::vector<double> z(static_cast<size_t>(n * kClasses));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < kClasses; ++c) {
        double s = b[c];
        for (int64_t f = 0; f < kFeatures; ++f) s += W[c * kFeatures + f] * x[i * kFeatures + f];
        z[i * kClasses + c] = s;
      }
    return z;
  }
  /// Mean cross-entropy of rows [begin, end), then one SGD step with rate lr; returns the loss.
  double sgd_step(const std::vector<float>& x, const std::vector<int64_t>& y, int64_t begin,
                  int64_t end, double lr) {
    int64_t n = end - begin;
    std::vector<double> z =
        logits(std::vector<float>(x.begin() + begin * kFeatures, x.begin() + end * kFeatures), n);
    std::vector<double> dW(W.size(), 0.0), db(b.size(), 0.0);
    double loss = 0;
    for (int64_t i = 0; i < n; ++i) {
      double m = *std::max_element(z.begin() + i * kClasses, z.begin() + (i + 1) * kClasses);
      double sum = 0;
      for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(z[i * kClasses + c] - m);
      int64_t label = y[begin + i];
      loss += -(z[i * kClasses + label] - m - std::log(sum));
      for (int64_t c = 0; c < kClasses; ++c) {
        double g = (std::exp(z[i * kClasses + c] - m) / sum - (c == label)) / n;
        db[c] += g;
        for (int64_t f = 0; f < kFeatures; ++f)
          dW[c * kFeatures + f] += g * x[(begin + i) * kFeatures + f];
      }
    }
    for (size_t k = 0; k < W.size(); ++k) W[k] -= lr * dW[k];
    for (size_t k = 0; k < b.size(); ++k) b[k] -= lr * db[k];
    return loss / n;
  }
};

using test::CliProcessTest;
using Result = test::CliResult;
using test::quote;
using test::read_text;
using test::onyx_binary;

class CliTrain : public CliProcessTest {
 protected:
  void SetUp() override {
    CliProcessTest::SetUp();
    if (HasFatalFailure()) return;
    make_data();
    model_ = make_model();
  }
  /// Three separable classes: the label is the largest of the first three features.
  void make_data() {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < kSamples; ++i) {
      for (int64_t f = 0; f < kFeatures; ++f) x_.push_back(u(rng));
      auto row = x_.begin() + i * kFeatures;
      y_.push_back(std::max_element(row, row + kClasses) - row);
    }
    for (const char* split : {"train", "val"}) {
      fs::create_directories(dir_ / split);
      npy::save(Tensor::from_vector<float>({kSamples, kFeatures}, x_), path(split, "x.npy"));
      npy::save(Tensor::from_vector<int64_t>({kSamples}, y_), path(split, "labels.npy"));
    }
  }

  /// x [N, 4] -> Gemm(W [3, 4], b [3], transB) -> logits [N, 3], with fixed initial weights.
  std::string make_model() {
    for (int64_t k = 0; k < kClasses * kFeatures; ++k) init_.W.push_back(0.05 * ((k * 7) % 5 - 2));
    init_.b = {0.1, -0.1, 0.0};
    test::ModelBuilder m(17);
    m.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(kFeatures)});
    std::vector<float> W(init_.W.begin(), init_.W.end()), b(init_.b.begin(), init_.b.end());
    m.initializer("W", Tensor::from_vector<float>({kClasses, kFeatures}, W));
    m.initializer("b", Tensor::from_vector<float>({kClasses}, b));
    test::set_attrs(m.node("Gemm", {"x", "W", "b"}, {"logits"}), {test::attr_int("transB", 1)});
    m.output("logits");
    auto model = m.build();
    model->ir_version = 8;
    model->graph->find_value("logits")->type =
        ValueType::tensor(DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(kClasses)});
    std::string p = (dir_ / "linear.onnx").string();
    save_model(*model, p);
    return p;
  }

  std::string path(const std::string& a, const std::string& b = "") const {
    return b.empty() ? (dir_ / a).string() : (dir_ / a / b).string();
  }
  /// The common part of the command line: model, data, SGD, fixed seed, one thread.
  std::string base_args(const std::string& optimizer = "--optimizer sgd --lr 0.5") const {
    return quote(model_) + " --data " + quote(path("train")) + " " + optimizer +
           " --batch 8 --threads 1 --seed 3 --no-progress";
  }

  std::string model_;
  std::vector<float> x_;
  std::vector<int64_t> y_;
  Linear init_;
};

TEST_F(CliTrain, SgdMatchesFloat64ReferenceAndWritesEverything) {
  Result r =
      onyx("train " + base_args() + " --no-shuffle --epochs 3 --val-data " + quote(path("val")) +
           " --metrics " + quote(path("m.jsonl")) + " --export " + quote(path("out.onnx")) +
           " --checkpoint-dir " + quote(path("ck")) + " --checkpoint-every 4" +
           " --profile " + quote(path("trace.json")) +
           (cli::loss_plot_available() ? " --plot " + quote(path("loss.png")) : ""));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  // The profile: every training-graph node once per optimizer step (9).
  {
    std::ifstream f(path("trace.json"));
    ASSERT_TRUE(f) << r.out;
    std::map<std::string, int> runs;
    const nlohmann::json trace = nlohmann::json::parse(f);
    for (const auto& e : trace.at("traceEvents"))
      if (e.value("cat", "") == "node") ++runs[e.at("name").get<std::string>()];
    ASSERT_FALSE(runs.empty());
    for (const auto& [name, n] : runs) EXPECT_EQ(n, 9) << name;
    EXPECT_NE(r.out.find("profile written to"), std::string::npos) << r.out;
  }

  // The reference: 3 epochs x 3 batches of 8 in order, plain SGD.
  Linear ref = init_;
  std::vector<double> losses;
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int64_t b = 0; b < kSamples; b += 8) losses.push_back(ref.sgd_step(x_, y_, b, b + 8, 0.5));

  // One line per optimizer step, then one per epoch: 9 + 3.
  auto lines = read_jsonl(path("m.jsonl"));
  ASSERT_EQ(lines.size(), 12u);
  int steps = 0;
  for (const auto& j : lines) {
    if (j.at("type") == "epoch") {
      EXPECT_EQ(j.at("step").get<int>(), steps);
      EXPECT_EQ(j.at("epoch").get<int>(), steps / 3);
      EXPECT_TRUE(j.contains("val_loss") && j.contains("val_accuracy")) << j.dump();
      continue;
    }
    ASSERT_LT(steps, 9);
    EXPECT_EQ(j.at("step").get<int>(), steps + 1);
    EXPECT_EQ(j.at("epoch").get<int>(), steps / 3 + 1);
    EXPECT_NEAR(j.at("loss").get<double>(), losses[steps], 1e-5) << j.dump();
    EXPECT_DOUBLE_EQ(j.at("lr").get<double>(), 0.5);
    EXPECT_GT(j.at("samples_per_s").get<double>(), 0.0);
    ++steps;
  }
  EXPECT_EQ(steps, 9);
  // The last epoch's validation numbers, recomputed from the reference weights.
  std::vector<double> z = ref.logits(x_, kSamples);
  double val_loss = 0;
  int right = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    auto row = z.begin() + i * kClasses;
    double m = *std::max_element(row, row + kClasses), sum = 0;
    for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(row[c] - m);
    val_loss += -(row[y_[i]] - m - std::log(sum)) / kSamples;
    right += std::max_element(row, row + kClasses) - row == y_[i];
  }
  EXPECT_NEAR(lines.back().at("val_loss").get<double>(), val_loss, 1e-5);
  EXPECT_NEAR(lines.back().at("val_accuracy").get<double>(), right / double(kSamples), 1e-12);

  // The export holds the reference weights and runs in `onyx run`.
  auto exported = load_model(path("out.onnx"));
  test::expect_near(exported->graph->initializers.at("W"), ref.W, 1e-5);
  test::expect_near(exported->graph->initializers.at("b"), ref.b, 1e-5);
  Result run = onyx("run " + quote(path("out.onnx")) + " --input " +
                    quote("x=" + path("train", "x.npy")) + " -o " + quote(path("run")));
  ASSERT_EQ(run.code, 0) << run.err;
  test::expect_near(npy::load(path("run", "logits.npy")), z, 1e-5);

  // Checkpoints every 4 steps and one at the end.
  for (const char* f :
       {"step-00000004.onyx", "step-00000008.onyx", "step-00000009.onyx", "step-00000009.json"})
    EXPECT_TRUE(fs::exists(path("ck", f))) << f;
  EXPECT_FALSE(fs::exists(path("ck", "step-00000003.onyx")));
  if (cli::loss_plot_available()) {
    std::string png = read_text(path("loss.png"));
    ASSERT_GT(png.size(), 1000u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  }
}

TEST_F(CliTrain, ResumeContinuesBitIdentically) {
  // Shuffled batches, Adam state and a cosine schedule all have to survive the restart.
  std::string common = base_args("--optimizer adamw --lr 0.05") + " --schedule cosine --warmup 2";
  Result full = onyx("train " + common + " --epochs 3 --export " + quote(path("full.onnx")) +
                     " --checkpoint-dir " + quote(path("ck_full")) + " --checkpoint-every 4");
  ASSERT_EQ(full.code, 0) << full.err;
  // Stop after step 4 (mid-epoch 2): keep only that checkpoint, then resume from the folder.
  fs::create_directories(path("ck"));
  for (const char* ext : {".onyx", ".json"})
    fs::copy_file(path("ck_full", std::string("step-00000004") + ext),
                  path("ck", std::string("step-00000004") + ext));
  Result resumed = onyx("train " + common + " --epochs 3 --export " + quote(path("resumed.onnx")) +
                        " --resume " + quote(path("ck")) + " --metrics " + quote(path("m.jsonl")));
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  auto a = load_model(path("full.onnx")), b = load_model(path("resumed.onnx"));
  for (const char* w : {"W", "b"}) {
    const Tensor &ta = a->graph->initializers.at(w), &tb = b->graph->initializers.at(w);
    ASSERT_EQ(ta.nbytes(), tb.nbytes());
    EXPECT_EQ(std::memcmp(ta.raw(), tb.raw(), ta.nbytes()), 0) << w << " differs after resume";
  }
  // Steps 5..9 and the two epochs that ended in the resumed run.
  auto lines = read_jsonl(path("m.jsonl"));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines.front().at("step").get<int>(), 5);
  EXPECT_EQ(lines.back().at("step").get<int>(), 9);

  // A different batch size would not continue the same run.
  expect_one_line_error(
      onyx("train " + common + " --epochs 3 --batch 6 --resume " + quote(path("ck"))), "--batch");
}

// --checkpoint-dir on a full disk: each failed save is one warning naming the file and the
// reason, training goes on and exports what an uninterrupted run exports, the previous
// checkpoint stays the newest and resumes, no partial file is left, and the run exits non-zero
// with one "onyx: error:" line counting the failed saves.
TEST_F(CliTrain, FullDiskKeepsTrainingAndThePreviousCheckpoint) {
  const std::string common =
      base_args("--optimizer adamw --lr 0.05") + " --schedule cosine --warmup 2 --epochs 3";
  Result full = onyx("train " + common + " --export " + quote(path("full.onnx")) +
                     " --checkpoint-dir " + quote(path("ck_full")) + " --checkpoint-every 4");
  ASSERT_EQ(full.code, 0) << full.err;
  // The room left: a layout .json and the export fit (under the file-size limit, files up to
  // this size), a checkpoint does not.
  const size_t room = 512;
  ASSERT_GT(fs::file_size(path("ck_full", "step-00000004.onyx")), room);
  ASSERT_LT(fs::file_size(path("full.onnx")), room);
  // Exit code and stderr; stdout is dropped, as a file it would count against the limit.
  auto run = [](const std::string& args) {
    std::string cmd = quote(onyx_binary()) + " " + args + " 2>&1 >/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return nlohmann::json{{"code", -1}, {"err", "popen failed"}};
    std::string err;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) err.append(buf, n);
    int status = ::pclose(p);
    return nlohmann::json{{"code", WIFEXITED(status) ? WEXITSTATUS(status) : -1}, {"err", err}};
  };
  const std::string disk_dir = path("disk");
  test::SmallDiskResult r = test::on_small_disk(disk_dir, 256 << 10, [&](test::SmallDisk& disk) {
    for (const char* ext : {".onyx", ".json"})
      fs::copy_file(path("ck_full", std::string("step-00000004") + ext),
                    disk.dir() + "/step-00000004" + ext);
    disk.fill(room);
    nlohmann::json out;
    out["train"] = run("train " + common + " --resume " + quote(disk.dir()) + " --checkpoint-dir " +
                       quote(disk.dir()) + " --checkpoint-every 4 --export " + quote(path("resumed.onnx")));
    out["files"] = nlohmann::json::array();
    for (const auto& e : fs::directory_iterator(disk.dir()))
      if (e.path().filename() != test::SmallDisk::filler_name()) out["files"].push_back(e.path().filename().string());
    disk.free();
    out["again"] = run("train " + common + " --resume " + quote(disk.dir()) + " --export " +
                       quote(path("again.onnx")));
    return out.dump();
  });
  ASSERT_EQ(r.error, "");
  RecordProperty("small_disk", r.kind == test::SmallDisk::Kind::Tmpfs ? "tmpfs" : "RLIMIT_FSIZE");
  const std::string reason = std::strerror(r.kind == test::SmallDisk::Kind::Tmpfs ? ENOSPC : EFBIG);
  nlohmann::json out = nlohmann::json::parse(r.text);
  const std::string err = out["train"]["err"];
  EXPECT_NE(out["train"]["code"].get<int>(), 0) << err;
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // Steps 8 (--checkpoint-every 4) and 9 (the end) did not fit; step 4 stays the last one.
  const std::string last = disk_dir + "/step-00000004.onyx";
  ASSERT_EQ(lines.size(), 3u) << err;
  for (int i = 0; i < 2; ++i) {
    const std::string step = i == 0 ? "8" : "9";
    EXPECT_NE(lines[i].find("checkpoint of step " + step + " not saved, training goes on (the last checkpoint is " +
                            last + ")"),
              std::string::npos)
        << lines[i];
    EXPECT_NE(lines[i].find("step-0000000" + step + ".onyx"), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find(reason), std::string::npos) << lines[i];
  }
  EXPECT_EQ(lines[2].rfind("onyx: error: [train] 2 checkpoint save(s) failed, the last checkpoint is " + last, 0), 0u)
      << lines[2];
  std::vector<std::string> files = out["files"];
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"step-00000004.json", "step-00000004.onyx"}));
  ASSERT_EQ(out["again"]["code"].get<int>(), 0) << out["again"]["err"].get<std::string>();
  // Training went on unchanged, and the kept checkpoint resumes to the same end.
  auto want = load_model(path("full.onnx"));
  for (const char* exported : {"resumed.onnx", "again.onnx"}) {
    auto got = load_model(path(exported));
    for (const char* w : {"W", "b"}) {
      const Tensor &a = want->graph->initializers.at(w), &b = got->graph->initializers.at(w);
      ASSERT_EQ(a.nbytes(), b.nbytes());
      EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << w << " differs in " << exported;
    }
  }
}

TEST_F(CliTrain, ConfigFileWithCommandLineOverride) {
  std::ofstream(path("cfg.json"))
      << nlohmann::json{{"data", path("train")}, {"optimizer", "sgd"}, {"lr", 0.5},
                        {"epochs", 3},           {"batch", 12},        {"shuffle", false},
                        {"betas", {0.8, 0.9}},   {"threads", 1}}
             .dump();
  Result r = onyx("train " + quote(model_) + " --config " + quote(path("cfg.json")) +
                  " --epochs 1 --no-progress --metrics " + quote(path("m.jsonl")));
  ASSERT_EQ(r.code, 0) << r.err;
  // --epochs 1 wins over the file's 3: two steps of 12 and one epoch line.
  auto lines = read_jsonl(path("m.jsonl"));
  ASSERT_EQ(lines.size(), 3u);
  Linear ref = init_;
  EXPECT_NEAR(lines[0].at("loss").get<double>(), ref.sgd_step(x_, y_, 0, 12, 0.5), 1e-5);
  EXPECT_NEAR(lines[1].at("loss").get<double>(), ref.sgd_step(x_, y_, 12, 24, 0.5), 1e-5);
  EXPECT_TRUE(fs::exists(path("linear.trained.onnx")));  // the default export path

  std::ofstream(path("bad.json")) << R"({"data": "x", "learning_rate": 0.1})";
  expect_one_line_error(onyx("train " + quote(model_) + " --config " + quote(path("bad.json"))),
                        "learning_rate");
}

TEST_F(CliTrain, BadInputIsOneLineError) {
  const std::string m = quote(model_);
  expect_one_line_error(onyx("train " + m + " --data " + quote(path("nowhere"))), "not a folder");
  expect_one_line_error(onyx("train " + m), "--data");
  expect_one_line_error(onyx("train " + base_args("--optimizer rmsprop")), "rmsprop");
  expect_one_line_error(onyx("train " + base_args() + " --loss hinge"), "hinge");
  expect_one_line_error(onyx("train " + base_args() + " --schedule exp"), "exp");
  expect_one_line_error(onyx("train " + base_args() + " --checkpoint-every 2"), "--checkpoint-dir");
  expect_one_line_error(onyx("train " + base_args() + " --schedule cosine --warmup 50"),
                        "--warmup 50");
  expect_one_line_error(onyx("train " + base_args() + " --epochs 0"), "--epochs");

  // Labels of the wrong dtype, a missing labels file, sample counts that differ, wrong width.
  fs::create_directories(path("bad"));
  fs::copy_file(path("train", "x.npy"), path("bad", "x.npy"));
  expect_one_line_error(onyx("train " + m + " --data " + quote(path("bad"))), "labels.npy");
  npy::save(Tensor::from_vector<float>({kSamples}, std::vector<float>(kSamples, 1.f)),
            path("bad", "labels.npy"));
  expect_one_line_error(onyx("train " + m + " --data " + quote(path("bad"))), "int64");
  npy::save(Tensor::from_vector<int64_t>({5}, {0, 1, 2, 0, 1}), path("bad", "labels.npy"));
  expect_one_line_error(onyx("train " + m + " --data " + quote(path("bad"))), "'labels.npy' has 5");
  npy::save(Tensor::from_vector<int64_t>({kSamples}, y_), path("bad", "labels.npy"));
  npy::save(Tensor::zeros(DataType::Float, {kSamples, 5}), path("bad", "x.npy"));
  expect_one_line_error(onyx("train " + m + " --data " + quote(path("bad"))), "[24, 5]");

  // A checkpoint that is not one.
  std::ofstream(path("junk.onyx")) << "not a checkpoint";
  expect_one_line_error(onyx("train " + base_args() + " --resume " + quote(path("junk.onyx"))),
                        "junk.onyx");
}

// --precision: bf16 trains close to float32; fp16 with an initial loss scale far too large
// skips steps (one `skipped_step` metrics line each, the scale halving) until it fits; a bad
// precision is a one-line error.
TEST_F(CliTrain, MixedPrecision) {
  Result f32 = onyx("train " + base_args() + " --no-shuffle --metrics " + quote(path("f.jsonl")));
  ASSERT_EQ(f32.code, 0) << f32.err;
  Result bf = onyx("train " + base_args() + " --no-shuffle --precision bf16 --metrics " +
                   quote(path("b.jsonl")));
  ASSERT_EQ(bf.code, 0) << bf.err;
  EXPECT_NE(bf.out.find("bf16 mixed precision"), std::string::npos) << bf.out;
  auto f = read_jsonl(path("f.jsonl")), b = read_jsonl(path("b.jsonl"));
  ASSERT_EQ(f.size(), b.size());
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i].at("type") == "step") {
      double lf = f[i].at("loss"), lb = b[i].at("loss");
      EXPECT_NEAR(lb, lf, 0.03 * lf + 1e-3) << i;
    }
  Result h = onyx("train " + base_args() + " --no-shuffle --precision fp16 --init-loss-scale 1e9 "
                  "--epochs 20 --metrics " + quote(path("h.jsonl")));
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_NE(h.out.find("skipped)"), std::string::npos) << h.out;  // the epoch line's count
  auto lines = read_jsonl(path("h.jsonl"));
  size_t skipped = 0, taken_after = 0;
  for (const auto& l : lines) {
    if (l.at("type") == "skipped_step") {
      ++skipped;
      EXPECT_EQ(l.at("next_loss_scale").get<double>(), l.at("loss_scale").get<double>() / 2);
      EXPECT_EQ(taken_after, 0u) << "a skip after steps were taken at a lower scale";
    } else if (l.at("type") == "step" && skipped > 0) {
      ++taken_after;
      EXPECT_LT(l.at("loss_scale").get<double>(), 1e9);
    }
  }
  EXPECT_GT(skipped, 0u);
  EXPECT_GT(taken_after, 10u);
  expect_one_line_error(onyx("train " + base_args() + " --precision fp8"), "--precision");
}

// --recompute-budget: planned from the data's first batch before training starts, printed,
// the losses unchanged; a budget nothing can meet and a size that is none are one-line errors.
TEST_F(CliTrain, RecomputeBudget) {
  Result plain = onyx("train " + base_args() + " --no-shuffle --metrics " + quote(path("a.jsonl")));
  ASSERT_EQ(plain.code, 0) << plain.err;
  Result budget = onyx("train " + base_args() + " --no-shuffle --recompute-budget 1GiB --metrics " +
                       quote(path("b.jsonl")));
  ASSERT_EQ(budget.code, 0) << budget.err;
  EXPECT_NE(budget.out.find("recompute: 0 of"), std::string::npos) << budget.out;
  EXPECT_NE(budget.out.find("(budget 1024.0 MiB)"), std::string::npos) << budget.out;
  auto a = read_jsonl(path("a.jsonl")), b = read_jsonl(path("b.jsonl"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].at("type") == "step") {
      EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << i;
    }
  expect_one_line_error(onyx("train " + base_args() + " --recompute-budget 1"), "out of reach");
  expect_one_line_error(onyx("train " + base_args() + " --recompute-budget 12XB"),
                        "--recompute-budget '12XB' is not a size");
}

}  // namespace

TEST(CliTrainOptions, ByteSizes) {
  EXPECT_EQ(cli::parse_byte_size("268435456", "--x"), 268435456);
  EXPECT_EQ(cli::parse_byte_size("256MiB", "--x"), 256 << 20);
  EXPECT_EQ(cli::parse_byte_size("256 MiB", "--x"), 256 << 20);
  EXPECT_EQ(cli::parse_byte_size("256M", "--x"), 256 << 20);
  EXPECT_EQ(cli::parse_byte_size("1.5GiB", "--x"), int64_t(3) << 29);
  EXPECT_EQ(cli::parse_byte_size("2kB", "--x"), 2000);
  EXPECT_EQ(cli::parse_byte_size("3MB", "--x"), 3000000);
  for (const char* bad : {"", "MiB", "12XB", "-5MiB", "0", "0.1", "1e30GiB", "nan"})
    EXPECT_THROW(cli::parse_byte_size(bad, "--x"), Error) << bad;
}

// --param-group REGEX:lr=R,weight_decay=W; the regex may itself hold ':'.
TEST(CliTrainOptions, ParamGroupSpecs) {
  ParamGroup g = cli::parse_param_group("(?:norm|bias):lr=1e-4,weight_decay=0");
  EXPECT_EQ(g.match, "(?:norm|bias)");
  EXPECT_EQ(g.lr, 1e-4);
  EXPECT_EQ(g.weight_decay, 0.0);
  g = cli::parse_param_group("^emb:weight-decay=0.1");
  EXPECT_FALSE(g.lr.has_value());
  EXPECT_EQ(g.weight_decay, 0.1);
  for (const char* bad : {"nocolon", ":lr=1", "x:lr", "x:lr=abc", "x:lr=-1", "x:momentum=1"})
    EXPECT_THROW(cli::parse_param_group(bad), Error) << bad;
}

}  // namespace onyx
