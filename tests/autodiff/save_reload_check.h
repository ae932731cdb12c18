// Checks that a training graph survives onyx::save_model + onyx::load_model: the reloaded
// model gives the same loss and gradients as the one built in memory.
//
//   expect_same_after_save_reload(std::move(forward), {.kind = "output", .output = "L"}, {});
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "inference/session.h"

namespace onyx::test {

/// Builds the training graph of `forward`, runs it, saves it to a temporary .onnx file,
/// reloads and runs that; every output (loss, gradients) must match to 1e-12.
inline void expect_same_after_save_reload(const Model& forward, const autodiff::LossSpec& loss,
                                          const std::vector<std::string>& params,
                                          std::optional<uint64_t> run_seed = std::nullopt) {
  auto tg = autodiff::build_training_graph(forward, loss, params);
  ASSERT_FALSE(tg.grads.empty());
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // Suite, test and process in the name: ctest runs tests of one name from two suites
  // (GradNorm and GradElementwise.MultiOpGraphSurvivesSaveReload) at once, and one rewriting the
  // file the other had mapped ended it with SIGBUS.
  std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      (std::string("onyx_train_") + info->test_suite_name() + "." + info->name() + "." +
       std::to_string(::getpid()) + ".onnx");
  save_model(*tg.model, path.string());
  auto reloaded = load_model(path.string());
  std::filesystem::remove(path);
  SessionOptions so;
  so.intra_op_threads = 1;
  so.opt_level = OptLevel::None;
  RunOptions ro;
  ro.seed = run_seed;
  std::vector<std::string> wanted = tg.grads;
  wanted.push_back(tg.loss);
  auto before = Session(std::move(tg.model), so).run({}, wanted, ro);
  auto after = Session(std::move(reloaded), so).run({}, wanted, ro);
  for (const auto& name : wanted) {
    auto a = before.at(name).to_double_vector();
    auto b = after.at(name).to_double_vector();
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << name << "[" << i << "]";
  }
}

}  // namespace onyx::test
