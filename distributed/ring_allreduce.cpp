#include "distributed/ring_allreduce.h"

#include <algorithm>
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
  segment_ = std::max<int64_t>(1, kRingSegmentBytes / elem_);
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
  const int send_chunk =
      reducing ? (rank_ - s + 2 * size_) % size_ : (rank_ + 1 - s + 2 * size_) % size_;
  recv_chunk_ = reducing ? (rank_ - s - 1 + 2 * size_) % size_ : (rank_ - s + 2 * size_) % size_;
  char* into = reducing ? incoming_->data() : chunk_ptr(recv_chunk_);
  // Sender and receiver cut a chunk into the same segments, and messages between two ranks
  // with one tag arrive in the order they were posted, so segment k meets segment k.
  const int64_t recv_count = chunk_count(recv_chunk_), send_count = chunk_count(send_chunk);
  recv_segments_ = static_cast<int>(segments(recv_count));
  const int send_segments = static_cast<int>(segments(send_count));
  reqs_.assign(static_cast<size_t>(recv_segments_ + send_segments), MPI_REQUEST_NULL);
  completed_.resize(reqs_.size());
  for (int k = 0; k < recv_segments_; ++k) {
    const int64_t first = k * segment_;
    const int n = static_cast<int>(std::min(segment_, recv_count - first));
    mpi::check(MPI_Irecv(into + first * elem_, n, dt_, left, tag_, comm_, &reqs_[size_t(k)]),
               "MPI_Irecv (ring allreduce)");
  }
  char* from = chunk_ptr(send_chunk);
  for (int k = 0; k < send_segments; ++k) {
    const int64_t first = k * segment_;
    const int n = static_cast<int>(std::min(segment_, send_count - first));
    mpi::check(MPI_Isend(from + first * elem_, n, dt_, right, tag_, comm_,
                         &reqs_[size_t(recv_segments_ + k)]),
               "MPI_Isend (ring allreduce)");
  }
  pending_ = static_cast<int>(reqs_.size());
}

bool RingAllreduce::test() {
  if (size_ <= 1) return true;
  int outcount = 0;
  mpi::check(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &outcount,
                          completed_.data(), MPI_STATUSES_IGNORE),
             "MPI_Testsome (ring allreduce)");
  if (outcount == MPI_UNDEFINED) outcount = 0;  // every request already completed
  const bool reducing = step_ < size_ - 1;
  for (int i = 0; i < outcount; ++i) {
    const int k = completed_[size_t(i)];
    if (reducing && k < recv_segments_) {
      // A received segment: add it into this rank's copy of the chunk while it is in cache.
      const int64_t first = k * segment_;
      const int n = static_cast<int>(std::min(segment_, chunk_count(recv_chunk_) - first));
      mpi::check(MPI_Reduce_local(incoming_->data() + first * elem_,
                                  chunk_ptr(recv_chunk_) + first * elem_, n, dt_, op_),
                 "MPI_Reduce_local (ring allreduce)");
    }
  }
  pending_ -= outcount;
  if (pending_ > 0) return false;
  if (++step_ == 2 * (size_ - 1)) return true;
  post();
  return false;
}

}  // namespace onyx::dist
