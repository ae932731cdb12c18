// Helper for run_failure.sh: the last rank dies (SIGKILL) in the middle of a large allreduce
// or hangs (SIGSTOP) just before it; the other ranks report the error they get and exit with
// status 1.
//   mpirun -n 3 onyx_dist_failure_probe kill|hang
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "distributed/communicator.h"
#include "graph/error.h"

int main(int argc, char** argv) {
  using namespace onyx;
  using namespace std::chrono_literals;
  if (argc != 2 || (std::strcmp(argv[1], "kill") != 0 && std::strcmp(argv[1], "hang") != 0)) {
    std::fprintf(stderr, "usage: onyx_dist_failure_probe kill|hang\n");
    return 2;
  }
  bool kill = std::strcmp(argv[1], "kill") == 0;
  try {
    auto comm = dist::make_mpi_communicator();
    comm->set_timeout(3s);
    Tensor warm = Tensor::zeros(DataType::Float, {1000});
    comm->allreduce(warm, dist::ReduceOp::Sum)->wait();
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
