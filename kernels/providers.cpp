// The providers this build has, by name.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <mutex>

#include "kernels/provider.h"

namespace onyx {
namespace {

using Factory = std::function<std::shared_ptr<ExecutionProvider>(int)>;

std::mutex& factories_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, Factory>& factories() {
  static std::map<std::string, Factory> f;
  return f;
}

}  // namespace

void register_provider(const std::string& name, Factory factory) {
  std::lock_guard<std::mutex> lock(factories_mutex());
  factories()[name] = std::move(factory);
}

std::vector<std::string> built_provider_names() {
  if (built_with_cuda()) return {"cuda", "cpu"};
  return {"cpu"};
}

std::shared_ptr<ExecutionProvider> make_provider(const std::string& name, int device_id) {
  if (name == "cpu") return make_cpu_provider();
  if (name == "cuda") return make_cuda_provider(device_id);
  Factory f;
  {
    std::lock_guard<std::mutex> lock(factories_mutex());
    auto it = factories().find(name);
    if (it != factories().end()) f = it->second;
  }
  if (f) return f(device_id);
  ONYX_THROW("[session] unknown execution provider '{}' (expected cpu or cuda; this build has {})",
             name, fmt::join(built_provider_names(), ", "));
}

const KernelRegistry& provider_registry(const std::string& name) {
  if (name == "cpu") return cpu_kernel_registry();
  if (name == "cuda" && built_with_cuda()) return cuda_kernel_registry();
  ONYX_THROW("[ops] unknown provider '{}' (this build has: {})", name,
             fmt::join(built_provider_names(), ", "));
}

}  // namespace onyx
