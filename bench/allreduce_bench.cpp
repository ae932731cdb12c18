// Allreduce bandwidth of the onyx Communicator next to raw MPI_Allreduce on the same
// buffers, float32, 1 KB to 256 MB in powers of 4. Prints a markdown table (rank 0).
//   mpirun -n 2 onyx_allreduce_bench [max_mb]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "distributed/communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace onyx;
  int64_t max_bytes = (argc > 1 ? std::atoll(argv[1]) : 256) << 20;
  // Sizes grow by this factor from 1 KB (2 finds where one schedule overtakes the other).
  const int64_t step = std::max<int64_t>(argc > 2 ? std::atoll(argv[2]) : 4, 2);
  auto comm = dist::make_mpi_communicator();  // initialises MPI
  const int n = comm->size();
  const double bus = 2.0 * (n - 1) / n;  // bytes each rank moves per byte reduced (ring)
  if (comm->rank() == 0) {
    std::printf("Allreduce (sum, float32) on %d ranks: median of timed iterations; bus "
                "bandwidth = size / time * 2(n-1)/n.\n\n",
                n);
    std::printf("| size | iters | onyx Communicator (us) | onyx busbw (GB/s) | MPI_Allreduce (us) "
                "| MPI busbw (GB/s) | onyx / MPI time |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int64_t bytes = 1024; bytes <= max_bytes; bytes *= step) {
    int64_t count = bytes / 4;
    Tensor t = Tensor::empty(DataType::Float, {count});
    float* p = t.data<float>();
    int iters = int(std::clamp<int64_t>((int64_t{256} << 20) / bytes, 5, 50));
    std::vector<double> ours, raw;
    for (int it = -2; it < iters; ++it) {  // two warm-up rounds
      std::fill(p, p + count, 1.0f);
      MPI_Barrier(MPI_COMM_WORLD);
      auto a = Clock::now();
      comm->allreduce(t, dist::ReduceOp::Sum)->wait();
      auto b = Clock::now();
      std::fill(p, p + count, 1.0f);
      MPI_Barrier(MPI_COMM_WORLD);
      auto c = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, p, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      auto d = Clock::now();
      if (it < 0) continue;
      ours.push_back(std::chrono::duration<double>(b - a).count());
      raw.push_back(std::chrono::duration<double>(d - c).count());
    }
    // The slowest rank defines the collective's time.
    double mine[2] = {median(ours), median(raw)}, worst[2];
    MPI_Reduce(mine, worst, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (comm->rank() != 0) continue;
    auto label = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB"
                                    : std::to_string(bytes >> 10) + " KB";
    std::printf("| %s | %d | %.1f | %.2f | %.1f | %.2f | %.2f |\n", label.c_str(), iters,
                worst[0] * 1e6, bytes * bus / worst[0] / 1e9, worst[1] * 1e6,
                bytes * bus / worst[1] / 1e9, worst[0] / worst[1]);
    std::fflush(stdout);
  }
  return 0;
}
