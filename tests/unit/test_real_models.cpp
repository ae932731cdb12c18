// Runs the small real models tools/gen_models.py writes (MLP, CNN, two-layer transformer)
// through onyx::Session and compares with the generator's float64 numpy references.
//
// Models are read from $ONYX_TEST_MODELS_DIR, else from tests/models/generated/ in the
// source tree (generated at build time by the onyx_test_models target, or by hand with
// `.venv/bin/python tools/gen_models.py`). Missing models fail the tests; they never skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "graph/onnx_io.h"
#include "inference/session.h"

namespace fs = std::filesystem;

namespace {

constexpr double kRelTol = 1e-4;  // max |a - b| <= kRelTol * max(1, |b|)

fs::path models_dir() {
  if (const char* env = std::getenv("ONYX_TEST_MODELS_DIR")) return env;
#ifdef ONYX_SOURCE_DIR
  return fs::path(ONYX_SOURCE_DIR) / "tests" / "models" / "generated";
#else
  return fs::path(__FILE__).parent_path().parent_path() / "models" / "generated";
#endif
}

struct DataSet {
  std::string name;
  std::vector<onyx::Tensor> inputs, outputs;
};

// Reads test_data_set_*/input_<i>.pb and output_<i>.pb in index order.
std::vector<DataSet> load_data_sets(const fs::path& dir) {
  std::vector<fs::path> set_dirs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_"))
      set_dirs.push_back(e.path());
  std::sort(set_dirs.begin(), set_dirs.end());
  std::vector<DataSet> sets;
  for (const auto& d : set_dirs) {
    DataSet s{d.filename().string(), {}, {}};
    for (int i = 0; fs::exists(d / ("input_" + std::to_string(i) + ".pb")); ++i)
      s.inputs.push_back(onyx::load_tensor_pb(d / ("input_" + std::to_string(i) + ".pb")));
    for (int i = 0; fs::exists(d / ("output_" + std::to_string(i) + ".pb")); ++i)
      s.outputs.push_back(onyx::load_tensor_pb(d / ("output_" + std::to_string(i) + ".pb")));
    sets.push_back(std::move(s));
  }
  return sets;
}

// The model's folder, or a test failure naming the command that creates it.
::testing::AssertionResult find_model(const std::string& name, fs::path* dir) {
  *dir = models_dir() / name;
  if (fs::exists(*dir / "model.onnx")) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "missing generated model " << (*dir / "model.onnx")
         << ". Generate the test models with `cmake --build <build> --target onyx_test_models` "
            "or `.venv/bin/python tools/gen_models.py` (needs numpy and onnx; see "
            "scripts/setup.sh), or point ONYX_TEST_MODELS_DIR at them.";
}

// Compares one output with its reference; the message names the model, set and worst index.
::testing::AssertionResult close(const std::string& what, const onyx::Tensor& got,
                                 const onyx::Tensor& want) {
  if (got.dtype() != onyx::DataType::Float || want.dtype() != onyx::DataType::Float)
    return ::testing::AssertionFailure()
           << what << ": expected float32, got " << onyx::dtype_name(got.dtype());
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << onyx::shape_str(got.shape())
                                         << ", expected " << onyx::shape_str(want.shape());
  const float* a = got.data<float>();
  const float* b = want.data<float>();
  double worst = -1;
  int64_t at = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double e = std::isnan(a[i])
                   ? INFINITY
                   : std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i])));
    if (e > worst) worst = e, at = i;
  }
  if (worst <= kRelTol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << at << " is " << a[at] << ", expected " << b[at]
         << " (relative error " << worst << " > " << kRelTol << ")";
}

// Runs every data set of `name` (at least `min_sets`: the symbolic-dim models carry two
// batch sizes) with the given options and checks every output.
void run_model(const std::string& name, size_t min_sets, onyx::OptLevel level) {
  fs::path dir;
  ASSERT_TRUE(find_model(name, &dir));
  auto sets = load_data_sets(dir);
  ASSERT_GE(sets.size(), min_sets) << "too few data sets under " << dir << "; regenerate";
  onyx::SessionOptions opts;
  opts.intra_op_threads = 2;
  opts.opt_level = level;
  onyx::Session session((dir / "model.onnx").string(), opts);
  ASSERT_EQ(session.inputs().size(), sets[0].inputs.size());
  for (const auto& s : sets) {
    onyx::NamedTensors feeds;
    for (size_t i = 0; i < s.inputs.size(); ++i) feeds[session.inputs()[i].name] = s.inputs[i];
    auto out = session.run(feeds);
    ASSERT_EQ(out.size(), s.outputs.size()) << name << "/" << s.name;
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      const std::string& oname = session.outputs()[i].name;
      ASSERT_TRUE(out.count(oname)) << name << "/" << s.name << ": no output " << oname;
      EXPECT_TRUE(close(name + "/" + s.name + "/" + oname, out.at(oname), s.outputs[i]));
    }
  }
}

}  // namespace

TEST(RealModels, Mlp) { run_model("mlp", 2, onyx::OptLevel::Basic); }
TEST(RealModels, Cnn) { run_model("cnn", 2, onyx::OptLevel::Basic); }
TEST(RealModels, Transformer) { run_model("transformer", 2, onyx::OptLevel::Basic); }
// The same references with every fusion and the NCHWc layout (the default level).
TEST(RealModels, MlpAllOptimizations) { run_model("mlp", 2, onyx::OptLevel::All); }
TEST(RealModels, CnnAllOptimizations) { run_model("cnn", 2, onyx::OptLevel::All); }
TEST(RealModels, TransformerAllOptimizations) {
  run_model("transformer", 2, onyx::OptLevel::All);
}

// The same models unoptimized and fully optimized: fusions must not change results.
TEST(RealModels, AllModelsOptNone) {
  for (const char* m : {"mlp", "cnn", "transformer"}) run_model(m, 2, onyx::OptLevel::None);
}
TEST(RealModels, AllModelsOptAll) {
  for (const char* m : {"mlp", "cnn", "transformer"}) run_model(m, 2, onyx::OptLevel::All);
}

// One session, several threads running different batch sizes at once.
TEST(RealModels, TransformerConcurrentRuns) {
  fs::path dir;
  ASSERT_TRUE(find_model("transformer", &dir));
  auto sets = load_data_sets(dir);
  ASSERT_GE(sets.size(), 2u);
  onyx::SessionOptions opts;
  opts.intra_op_threads = 1;
  onyx::Session session((dir / "model.onnx").string(), opts);
  const std::string in = session.inputs()[0].name, out = session.outputs()[0].name;
  std::vector<std::string> errors(sets.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < sets.size(); ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int rep = 0; rep < 5; ++rep) {
          auto got = session.run({{in, sets[t].inputs[0]}});
          auto r = close(sets[t].name, got.at(out), sets[t].outputs[0]);
          if (!r) errors[t] = r.message();
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < sets.size(); ++t) EXPECT_EQ(errors[t], "") << sets[t].name;
}

// A feed of the wrong width is a user error, reported with the input's name.
TEST(RealModels, MlpRejectsWrongFeatureCount) {
  fs::path dir;
  ASSERT_TRUE(find_model("mlp", &dir));
  onyx::Session session((dir / "model.onnx").string());
  auto bad = onyx::Tensor::zeros(onyx::DataType::Float, {2, 783});
  try {
    session.run({{"x", bad}});
    FAIL() << "expected onyx::Error";
  } catch (const onyx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("783"), std::string::npos) << e.what();
  }
}
