// Allreduce as a ring of point-to-point messages (reduce-scatter, then allgather: 2 (N - 1)
// steps, each rank sending and receiving 2 (N - 1) / N of the buffer), progressed by polling
// like a non-blocking collective.
//
// Why not MPI_Iallreduce: Open MPI runs non-blocking collectives through its libnbc schedules,
// 1.4-2.9x slower than the blocking MPI_Allreduce on the same data (measured in issue 16), and
// the blocking call cannot be abandoned when a peer dies or stops, which the communicator's
// failure detection needs (communicator.h). Point-to-point messages keep both: MPI's tuned
// transports (shared-memory single copy, TCP) and requests the communication thread can test
// and abandon.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace onyx::dist {

class RingAllreduce {
 public:
  /// Reduces `count` elements of `dt` at `buf` in place with `op` across `comm`'s ranks.
  /// Messages carry `tag`; the caller keeps one collective on `comm` at a time. `incoming`
  /// receives the reduce-scatter chunks: the communicator passes the same buffer to every ring
  /// (grown when needed, never freed between collectives, so a step's allreduces do not fault
  /// in fresh pages), and an abandoned ring, kept with its requests posted, keeps it alive.
  RingAllreduce(void* buf, int64_t count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, int tag,
                std::shared_ptr<std::vector<char>> incoming);

  /// Posts the first step's messages.
  void start();
  /// Advances: when the current step's messages are done, reduces what arrived and posts the
  /// next step. True once `buf` holds the result.
  bool test();

 private:
  int64_t chunk_begin(int64_t c) const { return count_ * c / size_; }
  int chunk_count(int64_t c) const { return static_cast<int>(chunk_begin(c + 1) - chunk_begin(c)); }
  char* chunk_ptr(int64_t c) const { return buf_ + chunk_begin(c) * elem_; }
  void post();

  char* buf_;
  int64_t count_;
  MPI_Datatype dt_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_, rank_ = 0, size_ = 1, elem_ = 0;
  int step_ = 0;        // steps 0 .. size-2 reduce-scatter, size-1 .. 2 size-3 allgather
  int recv_chunk_ = 0;  // the chunk the current step receives
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::shared_ptr<std::vector<char>> incoming_;  // a reduce-scatter step's received chunk
};

}  // namespace onyx::dist
