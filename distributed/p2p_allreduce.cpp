#include "distributed/p2p_allreduce.h"

#include "distributed/mpi_runtime.h"
#include "distributed/recursive_doubling_allreduce.h"
#include "distributed/ring_allreduce.h"

namespace onyx::dist {

std::unique_ptr<P2pAllreduce> make_p2p_allreduce(void* buf, int64_t count, MPI_Datatype dt,
                                                 MPI_Op op, bool sum_like, MPI_Comm comm, int tag,
                                                 std::shared_ptr<std::vector<char>> incoming) {
  int size = 1, elem = 0;
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  mpi::check(MPI_Type_size(dt, &elem), "MPI_Type_size");
  const bool power_of_two = (size & (size - 1)) == 0;
  if (sum_like && power_of_two && count * elem <= kRecursiveDoublingMaxBytes)
    return std::make_unique<RecursiveDoublingAllreduce>(buf, count, dt, op, comm, tag,
                                                        std::move(incoming));
  if (count < size) return nullptr;  // the ring needs a chunk per rank
  return std::make_unique<RingAllreduce>(buf, count, dt, op, comm, tag, std::move(incoming));
}

}  // namespace onyx::dist
