// Asynchronous use (several collectives in flight, waited out of order), bad arguments, and
// the timeout when one rank skips a collective.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "collective_reference.h"
#include "distributed/collective_checks.h"
#include "mpi_test_main.h"

namespace onyx::dist::test {
namespace {

using namespace std::chrono_literals;

TEST(Async, SeveralInFlightWaitedOutOfOrder) {
  Communicator& c = world();
  std::vector<int64_t> sizes = {1 << 18, 3, 1000, 1 << 20, 17};
  std::vector<Tensor> ts;
  std::vector<WorkHandle> works;
  for (int64_t n : sizes) {
    ts.push_back(filled<float>(c.rank(), n));
    works.push_back(c.allreduce(ts.back(), ReduceOp::Sum));
  }
  // Collectives complete in issue order: once the last is done, test() says so for all.
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();
  for (size_t k = 0; k < works.size(); ++k) {
    EXPECT_TRUE(works[k]->test());
    expect_all<float>(
        ts[k], [&](int64_t i) { return reference(ReduceOp::Sum, c.size(), i, false, false); },
        fmt::format("allreduce #{}", k));
  }
}

// A caller blocked in wait() progresses the queue itself (mpi_communicator.cpp, ProgressLink):
// two threads waiting at once take turns driving and both get their results, and what the
// waiter left queued is finished by the communication thread alone (polled with test(), no
// further wait()).
TEST(Async, ConcurrentWaitersAndWorkLeftToTheThread) {
  Communicator& c = world();
  for (int round = 0; round < 3; ++round) {
    std::vector<int64_t> sizes = {5, 1 << 16, 1 << 20, 3000, 1 << 14, 1 << 19};
    std::vector<Tensor> ts;
    std::vector<WorkHandle> works;
    for (int64_t n : sizes) {
      ts.push_back(filled<float>(c.rank(), n));
      works.push_back(c.allreduce(ts.back(), ReduceOp::Sum));
    }
    std::thread other([&] { works[3]->wait(); });
    works[1]->wait();
    other.join();
    // works[4] and [5] may still be queued: nobody waits on them.
    auto until = std::chrono::steady_clock::now() + 30s;
    while (!works[5]->test() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(100us);
    ASSERT_TRUE(works[5]->test()) << "the communication thread did not finish queued work";
    for (size_t k = 0; k < works.size(); ++k) {
      EXPECT_TRUE(works[k]->test());
      expect_all<float>(
          ts[k], [&](int64_t i) { return reference(ReduceOp::Sum, c.size(), i, false, false); },
          fmt::format("round {} allreduce #{}", round, k));
    }
  }
}

TEST(Async, TestPollsUntilDone) {
  Communicator& c = world();
  Tensor t = filled<double>(c.rank(), 1 << 20);
  WorkHandle w = c.allreduce(t, ReduceOp::Max);
  int64_t polls = 0;
  while (!w->test()) {
    ++polls;
    std::this_thread::sleep_for(50us);
  }
  w->wait();  // waiting on a finished work returns at once
  expect_all<double>(
      t, [&](int64_t i) { return reference(ReduceOp::Max, c.size(), i, false, false); },
      fmt::format("allreduce max after {} polls", polls));
}

TEST(BadInput, WrongSizesDtypesDevicesAndRoots) {
  Communicator& c = world();
  Tensor f = Tensor::zeros(DataType::Float, {4});
  Tensor wrong = Tensor::zeros(DataType::Float, {4 * c.size() + 1});
  EXPECT_THROW(c.allgather(f, wrong), Error);
  EXPECT_THROW(c.reduce_scatter(wrong, f, ReduceOp::Sum), Error);
  Tensor d = Tensor::zeros(DataType::Double, {4 * c.size()});
  EXPECT_THROW(c.allgather(f, d), Error);  // dtype differs
  EXPECT_THROW(c.broadcast(f, c.size()), Error);
  EXPECT_THROW(c.broadcast(f, -1), Error);
  Tensor i16 = Tensor::zeros(DataType::Int16, {4});
  EXPECT_THROW(c.allreduce(i16, ReduceOp::Sum), Error);
  float gpu_bytes[4] = {};
  Tensor on_gpu = Tensor::wrap(DataType::Float, {4}, gpu_bytes, {DeviceType::CUDA, 0});
  EXPECT_THROW(c.allreduce(on_gpu, ReduceOp::Sum), Error);
  Tensor undefined;
  EXPECT_THROW(c.allreduce(undefined, ReduceOp::Sum), Error);
  EXPECT_THROW(c.set_timeout(0ms), Error);
  try {
    c.allgather(f, wrong);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[mpi] allgather: output should have size"),
              std::string::npos)
        << e.what();
  }
  // Nothing was issued: the communicator still works.
  c.barrier();
}

TEST(BadInput, TimeoutEnvironmentVariable) {
  ::setenv("ONYX_COMM_TIMEOUT", "2.5", 1);
  EXPECT_EQ(default_timeout(), 2500ms);
  ::setenv("ONYX_COMM_TIMEOUT", "soon", 1);
  EXPECT_THROW(default_timeout(), Error);
  ::setenv("ONYX_COMM_TIMEOUT", "-1", 1);
  EXPECT_THROW(default_timeout(), Error);
  ::unsetenv("ONYX_COMM_TIMEOUT");
  EXPECT_EQ(default_timeout(), 60000ms);
}

// Rank 1 skips an allreduce: the others fail within the timeout with a message naming it;
// the broken communicator refuses further work; a fresh one works afterwards.
TEST(Timeout, SkippedCollectiveNamesTheRank) {
  auto c = make_mpi_communicator();
  c->set_timeout(2s);
  Tensor t = filled<float>(c->rank(), 1000);
  c->allreduce(t, ReduceOp::Sum)->wait();
  if (c->rank() != 1) {
    auto start = std::chrono::steady_clock::now();
    WorkHandle w = c->allreduce(t, ReduceOp::Sum);
    std::string message;
    try {
      w->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(message.find("rank 1 has not started it"), std::string::npos) << message;
    EXPECT_NE(message.find("allreduce (1000 x float, sum) (collective #2)"), std::string::npos)
        << message;
    EXPECT_GE(secs, 1.9);
    EXPECT_LT(secs, 4.0);
    EXPECT_THROW(w->test(), Error);
    EXPECT_THROW(c->allreduce(t, ReduceOp::Sum), Error);  // broken from now on
  }
  world().barrier();
  c.reset();
  auto fresh = make_mpi_communicator();
  Tensor u = filled<int64_t>(fresh->rank(), 7);
  fresh->allreduce(u, ReduceOp::Sum)->wait();
  expect_all<int64_t>(
      u, [&](int64_t i) { return reference(ReduceOp::Sum, fresh->size(), i, false, true); },
      "allreduce on a fresh communicator");
}

}  // namespace
}  // namespace onyx::dist::test
