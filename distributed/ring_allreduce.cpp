#include "distributed/ring_allreduce.h"

#include <utility>

#include "distributed/mpi_runtime.h"

namespace onyx::dist {

RingAllreduce::RingAllreduce(void* buf, int64_t count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                             int tag, std::shared_ptr<std::vector<char>> incoming)
    : buf_(static_cast<char*>(buf)),
      count_(count),
      dt_(dt),
      op_(op),
      comm_(comm),
      tag_(tag),
      incoming_(std::move(incoming)) {
  mpi::check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  mpi::check(MPI_Type_size(dt, &elem_), "MPI_Type_size");
  const size_t need = static_cast<size_t>(chunk_count(size_ - 1) + 1) * static_cast<size_t>(elem_);
  if (incoming_->size() < need) incoming_->resize(need);
}

void RingAllreduce::start() {
  step_ = 0;
  if (size_ > 1) post();
}

void RingAllreduce::post() {
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  // Reduce-scatter step s: send chunk rank - s, receive chunk rank - s - 1 and add it in; after
  // size - 1 steps this rank holds chunk rank + 1 reduced over all ranks. Allgather step s:
  // pass that chunk on, send chunk rank + 1 - s, receive chunk rank - s into place.
  const bool reducing = step_ < size_ - 1;
  const int s = reducing ? step_ : step_ - (size_ - 1);
  const int send_chunk = reducing ? (rank_ - s + 2 * size_) % size_ : (rank_ + 1 - s + 2 * size_) % size_;
  recv_chunk_ = reducing ? (rank_ - s - 1 + 2 * size_) % size_ : (rank_ - s + 2 * size_) % size_;
  void* into = reducing ? static_cast<void*>(incoming_->data()) : chunk_ptr(recv_chunk_);
  mpi::check(MPI_Irecv(into, chunk_count(recv_chunk_), dt_, left, tag_, comm_, &reqs_[0]),
             "MPI_Irecv (ring allreduce)");
  mpi::check(MPI_Isend(chunk_ptr(send_chunk), chunk_count(send_chunk), dt_, right, tag_, comm_,
                       &reqs_[1]),
             "MPI_Isend (ring allreduce)");
}

bool RingAllreduce::test() {
  if (size_ <= 1) return true;
  int done = 0;
  mpi::check(MPI_Testall(2, reqs_, &done, MPI_STATUSES_IGNORE), "MPI_Testall (ring allreduce)");
  if (!done) return false;
  if (step_ < size_ - 1)
    mpi::check(MPI_Reduce_local(incoming_->data(), chunk_ptr(recv_chunk_), chunk_count(recv_chunk_),
                                dt_, op_),
               "MPI_Reduce_local (ring allreduce)");
  if (++step_ == 2 * (size_ - 1)) return true;
  post();
  return false;
}

}  // namespace onyx::dist
