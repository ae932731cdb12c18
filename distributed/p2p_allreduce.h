// Allreduce over point-to-point messages, progressed by polling like a non-blocking
// collective: the communication thread posts it with start() and calls test() until true.
//
// Why not MPI_Iallreduce: Open MPI runs non-blocking collectives through its libnbc schedules,
// 1.4-2.9x slower than the blocking MPI_Allreduce on the same data (measured in issue 16), and
// the blocking call cannot be abandoned when a peer dies or stops, which the communicator's
// failure detection needs (communicator.h). Point-to-point messages keep both: MPI's tuned
// transports (shared-memory single copy, TCP) and requests the communication thread can test
// and abandon. Two schedules, picked by make_p2p_allreduce():
//   - recursive doubling (recursive_doubling_allreduce.h): log2(N) exchanges of the whole
//     buffer, for short buffers on a power-of-two number of ranks, where the number of message
//     rounds, not bytes, sets the time;
//   - a segmented ring (ring_allreduce.h): reduce-scatter then allgather, 2 (N - 1) / N of the
//     buffer sent and received per rank, for everything else.
// Both leave bitwise the same result on every rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace onyx::dist {

class P2pAllreduce {
 public:
  virtual ~P2pAllreduce() = default;
  /// Posts the first messages.
  virtual void start() = 0;
  /// Advances without blocking; true once the buffer holds the result.
  virtual bool test() = 0;
};

/// Buffers up to this size use recursive doubling when it applies (measured in bench/README.md,
/// 2 ranks on shared memory: up to 16 KB one round of whole-buffer exchange is as fast as the
/// ring's 2 (N - 1) rounds or faster; from 32 KB the ring's half-size messages win, 64 KB taking
/// 16 against 23 us on an Intel Xeon host where 64 KB by recursive doubling was 1.5x
/// MPI_Allreduce's time).
constexpr int64_t kRecursiveDoublingMaxBytes = 16 << 10;

/// Reduces `count` elements of `dt` at `buf` in place with `op` across `comm`'s ranks. Messages
/// carry `tag`; the caller keeps one collective on `comm` at a time. `sum_like`: `op` is a sum
/// (commutative and exact under operand swap, NaN included), which recursive doubling needs to
/// leave every rank the same bits; a max is not (MPI's max of NaN and x depends on the order).
/// `incoming` receives the partners' data: the communicator passes the same buffer to every
/// allreduce (grown when needed, never freed between collectives, so a step's allreduces do not
/// fault in fresh pages), and an abandoned allreduce, kept with its requests posted, keeps it
/// alive. Null when neither schedule applies (a buffer shorter than the number of ranks that
/// recursive doubling does not take): the caller uses MPI's own allreduce.
std::unique_ptr<P2pAllreduce> make_p2p_allreduce(void* buf, int64_t count, MPI_Datatype dt,
                                                 MPI_Op op, bool sum_like, MPI_Comm comm, int tag,
                                                 std::shared_ptr<std::vector<char>> incoming);

}  // namespace onyx::dist
