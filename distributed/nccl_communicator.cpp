// The NCCL Communicator: GPU buffers, one dedicated stream per communicator, a CUDA event
// per collective for completion; the unique id travels from rank 0 over MPI.
//
// Ordering: each collective first waits for work queued on the legacy default stream;
// tensors produced on other streams must be synchronised by the caller before issuing.
// A collective not done within the timeout aborts the NCCL communicator (freeing kernels
// stuck waiting for a peer); NCCL does not say which peer failed, so the message cannot.
#include <mpi.h>

#include <atomic>
#include <thread>

#include "distributed/collective_checks.h"
#include "distributed/cuda_check.h"
#include "distributed/mpi_runtime.h"

namespace onyx::dist {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kBackend = "nccl";

ncclDataType_t nccl_type(DataType dt) {
  switch (dt) {
    case DataType::Float: return ncclFloat32;
    case DataType::Double: return ncclFloat64;
    case DataType::Float16: return ncclFloat16;
    case DataType::BFloat16: return ncclBfloat16;
    case DataType::Int8: return ncclInt8;
    case DataType::UInt8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::Int64: return ncclInt64;
    default: ONYX_THROW("[nccl] no NCCL datatype for {}", dtype_name(dt));
  }
}

// ncclAvg divides after summing (integer division for integer types, as documented).
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  ONYX_THROW("[nccl] unknown reduce op {}", static_cast<int>(op));
}

/// What a communicator's works share with it.
struct NcclState {
  ncclComm_t comm = nullptr;
  int device = 0, rank = 0;
  std::atomic<int64_t> timeout_ms{60000};
  std::atomic<bool> aborted{false};
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string what, std::vector<Tensor> keep)
      : state_(std::move(state)), what_(std::move(what)), keep_(std::move(keep)) {
    cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    issued_ = Clock::now();
  }
  ~NcclWork() override { cudaEventDestroy(event_); }
  cudaEvent_t event() const { return event_; }

  void wait() override {
    auto deadline = issued_ + std::chrono::milliseconds(state_->timeout_ms.load());
    while (!test()) {
      if (Clock::now() > deadline) {
        // Aborting frees the kernels that wait for the missing peer.
        if (!state_->aborted.exchange(true)) ncclCommAbort(state_->comm);
        ONYX_THROW("[nccl] {} did not complete within {:.1f} s on rank {}: some rank did not "
                   "respond (NCCL does not name it); the communicator is aborted",
                   what_, state_->timeout_ms.load() / 1000.0, state_->rank);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool test() override {
    ONYX_CHECK(!state_->aborted.load(), "[nccl] {}: the communicator was aborted after an earlier "
               "failure", what_);
    cuda_check(cudaSetDevice(state_->device), "cudaSetDevice");
    cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      nccl_check(ncclCommGetAsyncError(state_->comm, &async), "ncclCommGetAsyncError");
      nccl_check(async, what_.c_str());
      return false;
    }
    cuda_check(rc, "cudaEventQuery");
    keep_.clear();
    return true;
  }

 private:
  std::shared_ptr<NcclState> state_;
  std::string what_;
  std::vector<Tensor> keep_;  // buffers stay alive until done
  cudaEvent_t event_ = nullptr;
  Clock::time_point issued_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int device_count) {
    mpi::ensure_initialized();
    mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &state_->rank), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    state_->device = mpi::local_rank() % device_count;
    state_->timeout_ms = default_timeout().count();
    cuda_check(cudaSetDevice(state_->device), "cudaSetDevice");
    ncclUniqueId id;
    if (state_->rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi::check(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast (NCCL id)");
    nccl_check(ncclCommInitRank(&state_->comm, size_, id, state_->rank), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaMalloc(&scratch_, sizeof(int32_t)), "cudaMalloc");
  }
  ~NcclCommunicator() override {
    cudaSetDevice(state_->device);
    if (!state_->aborted.exchange(true)) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(state_->comm);
    }
    cudaFree(scratch_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return state_->rank; }
  int size() const override { return size_; }
  int local_rank() const override { return mpi::local_rank(); }
  std::string backend() const override { return kBackend; }

  WorkHandle allreduce(Tensor& t, ReduceOp op) override {
    check_tensor(kBackend, "allreduce", "tensor", t, DeviceType::CUDA);
    return launch(fmt::format("allreduce ({}, {})", describe(t), reduce_op_name(op)), {t}, [&] {
      return ncclAllReduce(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), nccl_op(op),
                           state_->comm, stream_);
    });
  }
  WorkHandle broadcast(Tensor& t, int root) override {
    check_tensor(kBackend, "broadcast", "tensor", t, DeviceType::CUDA);
    check_root(kBackend, root, size_);
    return launch(fmt::format("broadcast ({}, root {})", describe(t), root), {t}, [&] {
      return ncclBroadcast(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), root, state_->comm,
                           stream_);
    });
  }
  WorkHandle allgather(const Tensor& in, Tensor& out) override {
    check_tensor(kBackend, "allgather", "input", in, DeviceType::CUDA);
    check_tensor(kBackend, "allgather", "output", out, DeviceType::CUDA);
    check_allgather(kBackend, in, out, size_);
    return launch(fmt::format("allgather ({})", describe(in)), {in, out}, [&] {
      return ncclAllGather(in.raw(), out.raw(), in.numel(), nccl_type(in.dtype()), state_->comm,
                           stream_);
    });
  }
  WorkHandle reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_tensor(kBackend, "reduce_scatter", "input", in, DeviceType::CUDA);
    check_tensor(kBackend, "reduce_scatter", "output", out, DeviceType::CUDA);
    check_reduce_scatter(kBackend, in, out, size_);
    return launch(fmt::format("reduce_scatter ({}, {})", describe(in), reduce_op_name(op)),
                  {in, out}, [&] {
                    return ncclReduceScatter(in.raw(), out.raw(), out.numel(),
                                             nccl_type(in.dtype()), nccl_op(op), state_->comm,
                                             stream_);
                  });
  }
  void barrier() override {
    Tensor flag = Tensor::wrap(DataType::Int32, {1}, scratch_, {DeviceType::CUDA, state_->device});
    allreduce(flag, ReduceOp::Sum)->wait();
  }
  void set_timeout(std::chrono::milliseconds t) override {
    check_timeout(kBackend, t);
    state_->timeout_ms = t.count();
  }

 private:
  template <typename F>
  WorkHandle launch(std::string what, std::vector<Tensor> keep, F&& call) {
    ONYX_CHECK(!state_->aborted.load(), "[nccl] {}: the communicator was aborted after an "
               "earlier failure", what);
    cuda_check(cudaSetDevice(state_->device), "cudaSetDevice");
    auto work = std::make_shared<NcclWork>(state_, what, std::move(keep));
    // Wait for the producers on the default stream, then run on our own stream.
    cuda_check(cudaEventRecord(ready_, nullptr), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    nccl_check(call(), what.c_str());
    cuda_check(cudaEventRecord(work->event(), stream_), "cudaEventRecord");
    return work;
  }

  std::shared_ptr<NcclState> state_ = std::make_shared<NcclState>();
  int size_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  ONYX_CHECK(rc == cudaSuccess && count > 0, "[nccl] no CUDA device ({})",
             rc == cudaSuccess ? "device count is 0" : cudaGetErrorString(rc));
  return std::make_unique<NcclCommunicator>(count);
}

}  // namespace onyx::dist
