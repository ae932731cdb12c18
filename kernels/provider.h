// ExecutionProvider: a device with its memory, its kernels, how bytes cross between it and
// the host, and the layouts its kernels prefer. The session places each node on the first
// provider (in the session's priority order) that has a kernel for it; CPU is last, the
// fallback. Upper layers reach a device only through this interface: nothing outside
// kernels/ includes kernels/cpu/* or kernels/cuda/*.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace onyx {

/// What a provider keeps for one run: a CUDA stream, say. CPU keeps nothing.
class RunResources {
 public:
  virtual ~RunResources() = default;
  /// The native stream this run's kernels queue on (a cudaStream_t), or nullptr.
  virtual void* stream() const { return nullptr; }
  /// Waits until everything queued in this run has finished.
  virtual void synchronize() {}
};

/// Layouts the graph passes may pick for this provider's kernels.
struct LayoutPreferences {
  /// Channel block of NCHWc convolution chains: 8 or 16, -1 for channels-last (one block of
  /// every channel), 0 to keep convolutions in NCHW.
  int64_t conv_channel_block = 0;
  /// Channel block of the layout the provider's Winograd 3x3 convolutions read and write (16
  /// where oneDNN has them: AVX-512), 0 when it has none. The NCHWc pass takes this block
  /// instead of conv_channel_block for graphs whose convolutions are mostly 3x3 stride 1.
  int64_t winograd_channel_block = 0;
  /// The provider's QLinearConv sums int8 products exactly at int8 speed (oneDNN with AVX-512
  /// VNNI): QDQ convolutions are fused into it (inference/fusions_qdq.cpp).
  bool exact_int8_convolutions = false;
};

class ExecutionProvider {
 public:
  virtual ~ExecutionProvider() = default;
  /// "cpu", "cuda", ...: the name KernelDef::provider registrations use.
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  /// Memory for tensors the provider's kernels produce (shared by all runs; thread-safe).
  virtual std::shared_ptr<Allocator> allocator() const = 0;
  virtual const KernelRegistry& registry() const = 0;
  virtual LayoutPreferences layout_preferences() const { return {}; }
  /// Host memory for what this provider's kernels write to the host (copies to the host):
  /// page-locked on CUDA, so the transfers run as DMA; nullptr: ordinary host memory.
  virtual std::shared_ptr<Allocator> host_allocator() const { return nullptr; }
  /// Per-run state (a stream); the executor hands it to this provider's kernels.
  virtual std::unique_ptr<RunResources> begin_run() const { return std::make_unique<RunResources>(); }
  /// Copies src's bytes into dst (same dtype and element count; non-string). Each is in host
  /// memory or on this provider's device. Queued on `run`'s stream when given; a copy into
  /// host memory has finished when this returns.
  virtual void copy(const Tensor& src, Tensor& dst, RunResources* run = nullptr) const = 0;
};

/// The CPU provider: a caching arena and every CPU kernel (kernels/cpu).
std::shared_ptr<ExecutionProvider> make_cpu_provider();
/// The CPU kernels, registered once per process.
const KernelRegistry& cpu_kernel_registry();
/// The CUDA provider on device `device_id`; onyx::Error "no CUDA device: ..." when this build
/// has no CUDA or the machine no such device.
std::shared_ptr<ExecutionProvider> make_cuda_provider(int device_id = 0);
/// The CUDA kernels (empty in a build without CUDA); no device needed.
const KernelRegistry& cuda_kernel_registry();
/// True when this build has the CUDA provider (whether or not a device is present).
bool built_with_cuda();
/// A provider by name ("cpu", "cuda", or one added by register_provider); onyx::Error naming
/// the known ones otherwise.
std::shared_ptr<ExecutionProvider> make_provider(const std::string& name, int device_id = 0);
/// Makes make_provider(name, id) call `factory` (an out-of-tree provider, or tests' provider
/// with a device of its own). Thread-safe; a second registration of a name replaces the first.
void register_provider(const std::string& name,
                       std::function<std::shared_ptr<ExecutionProvider>(int device_id)> factory);
/// Every provider this build has, in placement priority order (CPU last, the fallback),
/// with the kernels each registers whether or not its device is present: `onyx ops`.
std::vector<std::string> built_provider_names();
/// The kernel registry of a provider this build has, by name (no device needed).
const KernelRegistry& provider_registry(const std::string& name);

}  // namespace onyx
