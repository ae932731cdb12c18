// Helper for run_failure.sh: the last rank dies (SIGKILL) in the middle of a large allreduce
// or hangs (SIGSTOP) just before it; the other ranks report the error they get and exit with
// status 1. With --default-timeouts the communicator keeps its defaults (60 s collective
// timeout, 10 s peer timeout) instead of a 3 s collective timeout. `slow`: the last rank issues
// the allreduce 3 s late while alive (peer timeout 1 s): everyone must complete, exit 0.
//   mpirun -n 3 onyx_dist_failure_probe kill|hang|slow [--default-timeouts]
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "distributed/communicator.h"
#include "graph/error.h"

int main(int argc, char** argv) {
  using namespace onyx;
  using namespace std::chrono_literals;
  const bool defaults = argc == 3 && std::strcmp(argv[2], "--default-timeouts") == 0;
  if ((argc != 2 && !defaults) ||
      (std::strcmp(argv[1], "kill") != 0 && std::strcmp(argv[1], "hang") != 0 &&
       std::strcmp(argv[1], "slow") != 0)) {
    std::fprintf(stderr, "usage: onyx_dist_failure_probe kill|hang|slow [--default-timeouts]\n");
    return 2;
  }
  bool kill = std::strcmp(argv[1], "kill") == 0;
  bool slow = std::strcmp(argv[1], "slow") == 0;
  try {
    auto comm = dist::make_mpi_communicator();
    if (slow) {
      // Alive but late: its heartbeats keep coming, so a 1 s peer timeout must not fire.
      comm->set_peer_timeout(1s);
      Tensor t = Tensor::zeros(DataType::Float, {1 << 20});
      if (comm->rank() == comm->size() - 1) std::this_thread::sleep_for(3s);
      comm->allreduce(t, dist::ReduceOp::Sum)->wait();
      std::printf("rank %d: the slow allreduce completed\n", comm->rank());
      return 0;
    }
    if (!defaults) comm->set_timeout(3s);
    Tensor warm = Tensor::zeros(DataType::Float, {1000});
    comm->allreduce(warm, dist::ReduceOp::Sum)->wait();
    // run_failure.sh's log then tells a job ended during start-up from one ended later.
    std::printf("rank %d: ready\n", comm->rank());
    std::fflush(stdout);
    int victim = comm->size() - 1;
    Tensor big = Tensor::zeros(DataType::Float, {16 << 20});
    // A hung rank stops before issuing (so every survivor waits for it); a dying one dies
    // while its collective is under way.
    if (comm->rank() == victim && !kill) std::raise(SIGSTOP);
    dist::WorkHandle work = comm->allreduce(big, dist::ReduceOp::Sum);
    if (comm->rank() == victim) {
      std::this_thread::sleep_for(5ms);
      std::raise(SIGKILL);
    }
    work->wait();
    std::printf("rank %d: the allreduce completed although rank %d %s\n", comm->rank(), victim,
                kill ? "was killed" : "was stopped");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "probe: %s\n", e.what());
    return 1;
  }
}
