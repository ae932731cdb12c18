// Whole models on the CUDA provider against the CPU provider: ResNet-50 (batch 1 and 8), a
// BERT-base encoder and a GPT-2-small decoder, as bench/gen_torch_bench_models.py exports them
// (torch_resnet50, torch_bert_base, torch_gpt2_small), or as bench/gen_bench_models.py writes
// them (resnet50, bert_base, gpt2_small) when the torch exports are absent. The models are read
// from $ONYX_GPU_MODELS/<name>/model.onnx (scripts/gpu_check.sh device makes them on the GPU
// machine); a case is skipped, with the reason, when the variable is unset, its model is
// missing, or there is no CUDA device.
//
// Each case checks that no node falls back to the CPU (placement().fallback) and that every
// output agrees with the CPU session's:
//   relative L2 error ||g - w|| / ||w|| <= 1e-2, and every element |g - w| <= 0.05 * rms(w)
//   + 0.02 * |w|;
// NaN nowhere. Float32 through 50 (ResNet) or 12 (BERT, GPT-2) layers with cuBLASLt/cuDNN
// free to use TF32 differs from the CPU by about 1e-3 relative; a wrong kernel is off by O(1).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>

#include "inference/session.h"
#include "kernels/provider.h"

namespace fs = std::filesystem;

namespace onyx {
namespace {

struct Case {
  const char* label;
  std::vector<const char*> dirs;  // first one present wins
  int64_t batch;
};

const Case kCases[] = {
    {"resnet50_batch1", {"torch_resnet50", "resnet50"}, 1},
    {"resnet50_batch8", {"torch_resnet50", "resnet50"}, 8},
    {"bert_base", {"torch_bert_base", "bert_base"}, 1},
    {"gpt2_small", {"torch_gpt2_small", "gpt2_small"}, 1},
};

constexpr int64_t kSeq = 128;  // the sequence length of the generated transformers

std::string device_problem() {
  try {
    make_cuda_provider(0);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

/// Inputs for `s`: float tensors N(0, 1); int64 token ids in [0, 1000) (inside every vocabulary
/// here); an input named *mask* all ones. The first symbolic dimension is the batch, later
/// ones the sequence length.
NamedTensors make_feeds(const Session& s, int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  NamedTensors feeds;
  for (const IoInfo& io : s.inputs()) {
    Shape shape;
    bool first = true;
    EXPECT_TRUE(io.type.shape.has_value()) << io.name << " has no declared shape";
    for (const Dim& d : io.type.shape.value_or(SymShape{})) {
      shape.push_back(d.is_fixed() ? d.value : first ? batch : kSeq);
      if (!d.is_fixed()) first = false;
    }
    Tensor t = Tensor::empty(io.type.elem, shape);
    const int64_t n = t.numel();
    if (io.type.elem == DataType::Float) {
      std::normal_distribution<float> nd(0.f, 1.f);
      for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = nd(rng);
    } else if (io.type.elem == DataType::Int64) {
      const bool mask = io.name.find("mask") != std::string::npos;
      std::uniform_int_distribution<int64_t> ids(0, 999);
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = mask ? 1 : ids(rng);
    } else {
      ADD_FAILURE() << "input " << io.name << " is " << dtype_name(io.type.elem)
                    << "; this test makes float and int64 inputs only";
    }
    feeds[io.name] = t;
  }
  return feeds;
}

void expect_close(const std::string& what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype())) << what;
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
  double diff_sq = 0, ref_sq = 0, worst = 0;
  int64_t bad = 0, nan = 0, worst_at = -1;
  for (size_t i = 0; i < w.size(); ++i) ref_sq += w[i] * w[i];
  const double rms = w.empty() ? 0 : std::sqrt(ref_sq / double(w.size()));
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(g[i]) || std::isnan(w[i])) {
      ++nan;
      continue;
    }
    const double d = std::abs(g[i] - w[i]);
    diff_sq += d * d;
    if (d > 0.05 * rms + 0.02 * std::abs(w[i])) ++bad;
    if (d > worst) worst = d, worst_at = int64_t(i);
  }
  const double rel_l2 = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq);
  std::cout << "  " << what << ": " << shape_str(want.shape()) << ", relative L2 " << rel_l2
            << ", max |diff| " << worst << " (rms of CPU output " << rms << ")\n";
  EXPECT_EQ(nan, 0) << what << ": NaN in an output";
  EXPECT_LE(rel_l2, 1e-2) << what << ": relative L2 error";
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.size()
                    << " elements off by more than 0.05 * rms + 0.02 * |cpu|; worst at " << worst_at
                    << ": cuda " << (worst_at >= 0 ? g[size_t(worst_at)] : 0) << " cpu "
                    << (worst_at >= 0 ? w[size_t(worst_at)] : 0);
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

class CudaModel : public ::testing::TestWithParam<Case> {};

TEST_P(CudaModel, MatchesCpuWithoutFallback) {
  const Case& c = GetParam();
  const char* root = std::getenv("ONYX_GPU_MODELS");
  if (!root || !*root)
    GTEST_SKIP() << "ONYX_GPU_MODELS is not set (scripts/gpu_check.sh device sets it)";
  std::string problem = device_problem();
  if (!problem.empty()) GTEST_SKIP() << problem;
  fs::path model;
  for (const char* d : c.dirs)
    if (fs::exists(fs::path(root) / d / "model.onnx")) {
      model = fs::path(root) / d / "model.onnx";
      break;
    }
  if (model.empty()) {
    std::string looked;
    for (const char* d : c.dirs) looked += std::string(" ") + root + "/" + d + "/model.onnx";
    GTEST_SKIP() << "no model:" << looked;
  }
  std::cout << "  model " << model.string() << ", batch " << c.batch << "\n";

  SessionOptions cuda_opts, cpu_opts;
  cuda_opts.providers = {"cuda", "cpu"};
  cpu_opts.providers = {"cpu"};
  Session gpu(model.string(), cuda_opts);

  // Placement: no fallback; a count per provider for the log.
  std::map<std::string, int> per_provider;
  int copies = 0, fallbacks = 0;
  std::string fallen;
  for (const NodePlacement& p : gpu.placement()) {
    if (p.op_type == "MemcpyFromHost" || p.op_type == "MemcpyToHost") {
      ++copies;
      continue;
    }
    ++per_provider[p.provider];
    if (p.fallback) {
      ++fallbacks;
      if (fallbacks <= 20) fallen += "\n    " + (p.domain.empty() ? "" : p.domain + ".") + p.node;
    }
  }
  std::cout << "  placement:";
  for (const auto& [provider, n] : per_provider) std::cout << " " << n << " on " << provider << ",";
  std::cout << " " << copies << " copies, " << fallbacks << " fallbacks\n";
  EXPECT_EQ(fallbacks, 0) << "nodes the CUDA provider has no kernel for:" << fallen;
  EXPECT_GT(per_provider["cuda"], 0);

  const NamedTensors feeds = make_feeds(gpu, c.batch, 1234);
  NamedTensors want;
  {
    Session cpu(model.string(), cpu_opts);
    want = cpu.run(feeds);
  }
  NamedTensors got = gpu.run(feeds);
  // A second run: steady state (cached plans, the arena's blocks reused) gives the same.
  RunStats stats;
  NamedTensors again = gpu.run(feeds, {}, &stats);
  std::cout << "  second CUDA run " << stats.wall_ms << " ms (host inputs and outputs included)\n";
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    expect_close(name, got.at(name), w);
    expect_close(name + " (second run)", again.at(name), w);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModel, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.label);
                         });

}  // namespace
}  // namespace onyx
