// The CUDA provider: device memory from a caching arena over cudaMalloc (no cudaMalloc or
// cudaFree in steady state), one stream per run, copies between host and device, and the
// CUDA kernels; copies to the host land in page-locked memory (a second arena). Convolutions stay NCHW (cuDNN's own choice of algorithm does the rest).
#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "kernels/arena.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/provider.h"

namespace onyx {
namespace {

/// cudaMalloc / cudaFree on one device: the arena's backing allocator.
class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    ONYX_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so later calls work
      throw std::bad_alloc();
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    cudaSetDevice(device_);
    cudaFree(ptr);
  }
  Device device() const override { return {DeviceType::CUDA, device_}; }

 private:
  int device_;
};

/// Page-locked host memory (cudaHostAlloc): copies to and from it run as DMA, asynchronously.
class CudaPinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    return p;
  }
  void deallocate(void* ptr, size_t) override { cudaFreeHost(ptr); }
};

/// A run's stream, taken from the provider's pool and given back when the run ends, so
/// steady-state runs create no streams.
class CudaRun final : public RunResources {
 public:
  CudaRun(int device, cudaStream_t s, std::function<void(cudaStream_t)> give_back)
      : device_(device), stream_(s), give_back_(std::move(give_back)) {}
  ~CudaRun() override {
    cudaStreamSynchronize(stream_);
    give_back_(stream_);
  }
  void* stream() const override { return stream_; }
  void synchronize() override {
    ONYX_CUDA_CHECK(cudaSetDevice(device_));
    ONYX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::function<void(cudaStream_t)> give_back_;
};

class CudaProvider final : public ExecutionProvider,
                           public std::enable_shared_from_this<CudaProvider> {
 public:
  explicit CudaProvider(int device) : device_(device) {
    arena_ = std::make_shared<Arena>(std::make_shared<CudaDeviceAllocator>(device));
  }
  ~CudaProvider() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  }
  std::string name() const override { return cuda::kProvider; }
  Device device() const override { return {DeviceType::CUDA, device_}; }
  std::shared_ptr<Allocator> allocator() const override { return arena_; }
  const KernelRegistry& registry() const override { return cuda_kernel_registry(); }
  std::shared_ptr<Allocator> host_allocator() const override { return pinned_; }

  std::unique_ptr<RunResources> begin_run() const override {
    ONYX_CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!streams_.empty()) {
        s = streams_.back();
        streams_.pop_back();
      }
    }
    if (!s) ONYX_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto self = shared_from_this();
    return std::make_unique<CudaRun>(device_, s, [self](cudaStream_t done) {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->streams_.push_back(done);
    });
  }

  void copy(const Tensor& src, Tensor& dst, RunResources* run) const override {
    ONYX_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.dtype() != DataType::String,
               "[cuda] copy of {} {} into {} {}", dtype_name(src.dtype()), shape_str(src.shape()),
               dtype_name(dst.dtype()), shape_str(dst.shape()));
    for (const Tensor* t : std::initializer_list<const Tensor*>{&src, &dst})
      ONYX_CHECK(t->device().type == DeviceType::CPU || t->device() == device(),
                 "[cuda] copy touches {}, but this provider is {}", t->device().str(), device().str());
    if (src.nbytes() == 0) return;
    ONYX_CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = run ? static_cast<cudaStream_t>(run->stream()) : nullptr;
    ONYX_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, s));
    if (dst.device().type == DeviceType::CPU || !run) ONYX_CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  int device_;
  std::shared_ptr<Arena> arena_;
  std::shared_ptr<Arena> pinned_ = std::make_shared<Arena>(std::make_shared<CudaPinnedAllocator>());
  mutable std::mutex mu_;
  mutable std::vector<cudaStream_t> streams_;
};

}  // namespace

bool built_with_cuda() { return true; }

const KernelRegistry& cuda_kernel_registry() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    cuda::register_all_cuda_kernels(r);
    return r;
  }();
  return registry;
}

std::shared_ptr<ExecutionProvider> make_cuda_provider(int device_id) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    ONYX_THROW("[cuda] no CUDA device: {} (cuda:{} was asked for)", cudaGetErrorString(rc), device_id);
  }
  ONYX_CHECK(device_id >= 0 && device_id < count, "[cuda] no CUDA device: cuda:{} was asked for, this machine has {}",
             device_id, count);
  return std::make_shared<CudaProvider>(device_id);
}

}  // namespace onyx
