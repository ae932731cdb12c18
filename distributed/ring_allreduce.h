// Allreduce as a ring of point-to-point messages: reduce-scatter, then allgather, 2 (N - 1)
// steps, each rank sending and receiving 2 (N - 1) / N of the buffer. Each step's chunk travels
// as segments of kRingSegmentBytes, all posted at once, and a received segment is reduced as
// soon as it lands, so the reduction can overlap the transfer of the segments behind it and
// read data still in cache. Measured against whole-chunk steps (bench/README.md, 2026-12-03) the
// gain is within this VM's run-to-run noise; the ring stays 1.2-1.8x MPI_Allreduce's time from
// 64 KB to 4 MB.
// Every chunk is reduced on one rank and passed on, so all ranks end with the same bits.
#pragma once

#include <vector>

#include "distributed/p2p_allreduce.h"

namespace onyx::dist {

/// Segment size of a ring step's messages: small enough to stay in a core's L2 between the
/// copy that receives it and the reduction that reads it.
constexpr int64_t kRingSegmentBytes = 256 << 10;

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
  int64_t segments(int64_t elements) const { return (elements + segment_ - 1) / segment_; }
  void post();

  char* buf_;
  int64_t count_;
  MPI_Datatype dt_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_, rank_ = 0, size_ = 1, elem_ = 0;
  int64_t segment_ = 1;  // elements per segment
  int step_ = 0;         // steps 0 .. size-2 reduce-scatter, size-1 .. 2 size-3 allgather
  int recv_chunk_ = 0;   // the chunk the current step receives
  int recv_segments_ = 0;
  // The current step's requests: its receives first (recv_segments_), then its sends.
  std::vector<MPI_Request> reqs_;
  std::vector<int> completed_;  // MPI_Testsome's output
  int pending_ = 0;             // requests of the step not yet completed
  std::shared_ptr<std::vector<char>> incoming_;  // a reduce-scatter step's received chunk
};

}  // namespace onyx::dist
