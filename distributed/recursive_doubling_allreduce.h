// Allreduce by recursive doubling: in round k each rank swaps its whole buffer with rank ^ 2^k
// and adds what it received, so after log2(N) rounds every rank holds the sum. One message
// round per doubling instead of the ring's 2 (N - 1): the schedule for short buffers, whose
// time is the messages' latency. Needs a power-of-two number of ranks and a sum: both partners
// add the same two operands (in swapped order), so every rank ends with the same bits.
#pragma once

#include "distributed/p2p_allreduce.h"

namespace onyx::dist {

class RecursiveDoublingAllreduce : public P2pAllreduce {
 public:
  RecursiveDoublingAllreduce(void* buf, int64_t count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                             int tag, std::shared_ptr<std::vector<char>> incoming);
  void start() override;
  bool test() override;

 private:
  void post();

  char* buf_;
  int count_;
  MPI_Datatype dt_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_, rank_ = 0, size_ = 1;
  int distance_ = 1;  // the current round's partner is rank ^ distance_
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::shared_ptr<std::vector<char>> incoming_;
};

}  // namespace onyx::dist
