// NCCL communicator with one rank (or as many as mpirun starts): allreduce, broadcast,
// allgather and reduce-scatter on GPU buffers against float64 references. Skipped, with
// the reason, where there is no CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>

#include "distributed/communicator.h"
#include "graph/error.h"

namespace onyx::dist {
namespace {

std::unique_ptr<Communicator> make_or_skip_reason(std::string* reason) {
  try {
    return make_nccl_communicator();
  } catch (const Error& e) {
    if (std::string(e.what()).find("[nccl] no CUDA device") == std::string::npos) throw;
    *reason = e.what();
    return nullptr;
  }
}

/// A float32 GPU tensor holding `host`.
Tensor to_gpu(const std::vector<float>& host, int device) {
  void* p = nullptr;
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  auto storage = std::make_shared<Storage>(p, host.size() * sizeof(float),
                                           Device{DeviceType::CUDA, device},
                                           [](void* q) { cudaFree(q); });
  return Tensor(DataType::Float, {int64_t(host.size())}, storage);
}

std::vector<float> to_host(const Tensor& t) {
  std::vector<float> h(t.numel());
  EXPECT_EQ(cudaMemcpy(h.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

float value(int rank, int64_t i) { return float((i * 7 + rank * 13) % 17 - 8); }

TEST(Nccl, CollectivesMatchReference) {
  std::string reason;
  auto c = make_or_skip_reason(&reason);
  if (!c) GTEST_SKIP() << reason;
  EXPECT_EQ(c->backend(), "nccl");
  int n = c->size(), me = c->rank();
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  for (int64_t len : {int64_t{1}, int64_t{1000}, int64_t{1} << 22}) {
    std::vector<float> host(len);
    for (int64_t i = 0; i < len; ++i) host[i] = value(me, i);
    Tensor t = to_gpu(host, device);
    c->allreduce(t, ReduceOp::Sum)->wait();
    std::vector<float> got = to_host(t);
    for (int64_t i = 0; i < len; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += value(r, i);
      ASSERT_EQ(got[i], want) << "allreduce element " << i << " of " << len;
    }
    Tensor b = to_gpu(host, device);
    c->broadcast(b, n - 1)->wait();
    got = to_host(b);
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(got[i], value(n - 1, i)) << "broadcast " << i;
    Tensor all = to_gpu(std::vector<float>(len * n, -1.f), device);
    c->allgather(to_gpu(host, device), all)->wait();
    got = to_host(all);
    for (int64_t j = 0; j < len * n; ++j) ASSERT_EQ(got[j], value(int(j / len), j % len));
    std::vector<float> wide(len * n);
    for (int64_t j = 0; j < len * n; ++j) wide[j] = value(me, j);
    Tensor part = to_gpu(std::vector<float>(len, 0.f), device);
    c->reduce_scatter(to_gpu(wide, device), part, ReduceOp::Max)->wait();
    got = to_host(part);
    for (int64_t i = 0; i < len; ++i) {
      double want = -1e30;
      for (int r = 0; r < n; ++r) want = std::max<double>(want, value(r, me * len + i));
      ASSERT_EQ(got[i], want) << "reduce_scatter element " << i;
    }
  }
  c->barrier();
  // A CPU tensor is refused.
  Tensor cpu = Tensor::zeros(DataType::Float, {4});
  EXPECT_THROW(c->allreduce(cpu, ReduceOp::Sum), Error);
}

TEST(Nccl, NoDeviceIsAClearError) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count > 0) {
    EXPECT_EQ(make_nccl_communicator()->backend(), "nccl");
    return;
  }
  try {
    make_nccl_communicator();
    ADD_FAILURE() << "make_nccl_communicator() succeeded without a CUDA device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[nccl] no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onyx::dist
