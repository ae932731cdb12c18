// Where the bench models' nodes would run on CUDA, checked without a GPU: a provider named
// "cuda" with the CUDA kernel registry and host memory tagged as a test device. The session
// partitions the graph and builds every kernel (nothing runs), so a node the CUDA registry
// has no kernel for shows up as a fallback here exactly as it would on a GPU.
// Models: $ONYX_PLACEMENT_MODELS or bench/models (bench/gen_*_models.py write them); a model
// that is missing is skipped, naming the generator.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "inference/session.h"
#include "kernels/arena.h"
#include "kernels/provider.h"

namespace onyx {
namespace {

class HostTaggedMemory final : public Allocator {
 public:
  void* allocate(size_t bytes) override { return cpu_allocator()->allocate(bytes); }
  void deallocate(void* p, size_t bytes) override { cpu_allocator()->deallocate(p, bytes); }
  Device device() const override { return {DeviceType::Test, 0}; }
};

/// The CUDA registry on host memory: enough to partition and to create kernels.
class CudaRegistryOnly final : public ExecutionProvider {
 public:
  std::string name() const override { return "cuda"; }
  Device device() const override { return {DeviceType::Test, 0}; }
  std::shared_ptr<Allocator> allocator() const override { return arena_; }
  const KernelRegistry& registry() const override { return cuda_kernel_registry(); }
  void copy(const Tensor& src, Tensor& dst, RunResources*) const override {
    if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }

 private:
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>(std::make_shared<HostTaggedMemory>());
};

std::filesystem::path models_dir() {
  const char* env = std::getenv("ONYX_PLACEMENT_MODELS");
  return env ? env : ONYX_SOURCE_DIR "/bench/models";
}

class CudaPlacement : public testing::TestWithParam<const char*> {};

TEST_P(CudaPlacement, BenchModelRunsWithoutFallbackNodes) {
  if (!built_with_cuda()) GTEST_SKIP() << "this build has no CUDA provider";
  const std::filesystem::path model = models_dir() / GetParam() / "model.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " is missing (bench/gen_bench_models.py, bench/gen_torch_bench_models.py)";
  register_provider("cuda-registry-only", [](int) { return std::make_shared<CudaRegistryOnly>(); });
  SessionOptions o;
  o.providers = {"cuda-registry-only", "cpu"};
  o.intra_op_threads = 1;
  Session s(model.string(), o);
  std::map<std::string, int> per_provider, fallback_ops;
  for (const NodePlacement& p : s.placement()) {
    ++per_provider[p.provider];
    if (p.fallback) ++fallback_ops[p.domain.empty() ? p.op_type : p.domain + "." + p.op_type];
  }
  std::string summary;
  for (const auto& [name, n] : per_provider) summary += fmt::format(" {}={}", name, n);
  std::cout << GetParam() << ":" << summary << "\n";
  for (const auto& [op, n] : fallback_ops) ADD_FAILURE() << GetParam() << ": " << n << " " << op << " node(s) fall back to the CPU";
}

INSTANTIATE_TEST_SUITE_P(Bench, CudaPlacement,
                         testing::Values("resnet50", "bert_base", "gpt2_small", "torch_resnet50",
                                         "torch_bert_base", "torch_gpt2_small", "torch_resnet18",
                                         "torch_mlp"));

}  // namespace
}  // namespace onyx
