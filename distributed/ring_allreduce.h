// Allreduce as a ring of point-to-point messages: reduce-scatter, then allgather, 2 (N - 1)
// steps, each rank sending and receiving 2 (N - 1) / N of the buffer. Every chunk is cut into
// segments of kRingSegmentBytes, and each segment goes through the steps on its own: as soon as
// a segment's step is done (received, reduced, its send completed) its next step is posted,
// while the segments behind it are still in flight. So one segment's reduction overlaps the
// transfer of the others, and the allgather of the first segments overlaps the reduce-scatter
// of the last (steps posted as one batch and completed together kept both phases apart: 1.1-1.4x
// MPI_Allreduce's time at 1-4 MB on 2 ranks, bench/README.md).
// Every chunk is reduced on one rank and passed on, so all ranks end with the same bits.
#pragma once

#include <vector>

#include "distributed/p2p_allreduce.h"

namespace onyx::dist {

/// Segment size of the ring's messages: small enough to stay in a core's L2 between the copy
/// that receives it and the reduction that reads it, and to pipeline a few MB over several
/// segments; large enough that a message's fixed cost stays small next to its bytes.
constexpr int64_t kRingSegmentBytes = 512 << 10;

class RingAllreduce : public P2pAllreduce {
 public:
  RingAllreduce(void* buf, int64_t count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, int tag,
                std::shared_ptr<std::vector<char>> incoming);
  void start() override;
  bool test() override;

 private:
  int64_t chunk_begin(int64_t c) const { return count_ * c / size_; }
  int64_t chunk_count(int64_t c) const { return chunk_begin(c + 1) - chunk_begin(c); }
  char* chunk_ptr(int64_t c) const { return buf_ + chunk_begin(c) * elem_; }
  /// Elements of segment `k` of chunk `c` (0 for a chunk one element shorter than the longest,
  /// whose last segment is empty: every chunk has the same number of segments).
  int segment_count(int64_t c, int64_t k) const;
  /// The chunks step `s` sends and receives on this rank.
  int send_chunk(int s) const;
  int recv_chunk(int s) const;
  bool reducing(int s) const { return s < size_ - 1; }
  /// Posts the receive and the send of step `s` for segment `k`.
  void post(int s, int64_t k);

  char* buf_;
  int64_t count_;
  MPI_Datatype dt_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_, rank_ = 0, size_ = 1, elem_ = 0;
  int64_t segment_ = 1;   // elements per segment
  int64_t segments_ = 0;  // segments per chunk
  int steps_ = 0;         // 2 (size - 1): size - 1 reduce-scatter steps, then the allgather's
  // Segment k's requests of the step it is in: reqs_[2k] its receive, reqs_[2k + 1] its send.
  std::vector<MPI_Request> reqs_;
  std::vector<int> completed_;  // MPI_Testsome's output
  std::vector<int> step_of_;    // the step each segment has posted (-1: none yet)
  std::vector<char> finished_;  // segments whose last step has completed
  // The next (step, segment) to post. Every rank posts in the same (step, segment) order, so its
  // n-th send to the right and the right rank's n-th receive from the left are the same message
  // under one tag; a segment's next step is posted only once its current one is done.
  int next_step_ = 0;
  int64_t next_segment_ = 0;
  int64_t unfinished_ = 0;  // segments that have not completed their last step
  std::shared_ptr<std::vector<char>> incoming_;  // reduce-scatter receives, a slot per segment
};

}  // namespace onyx::dist
