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
  // The last chunk is the longest (chunk_begin rounds down).
  const int64_t longest = chunk_count(size_ - 1);
  segments_ = (longest + segment_ - 1) / segment_;
  steps_ = 2 * (size_ - 1);
  const size_t need = static_cast<size_t>(longest + 1) * static_cast<size_t>(elem_);
  if (incoming_->size() < need) incoming_->resize(need);
}

int RingAllreduce::segment_count(int64_t c, int64_t k) const {
  return static_cast<int>(std::clamp<int64_t>(chunk_count(c) - k * segment_, 0, segment_));
}

// Reduce-scatter step s: send chunk rank - s, receive chunk rank - s - 1 and add it in; after
// size - 1 steps this rank holds chunk rank + 1 reduced over all ranks. Allgather step s: pass
// that chunk on, send chunk rank + 1 - s, receive chunk rank - s into place.
int RingAllreduce::send_chunk(int s) const {
  return reducing(s) ? (rank_ - s + 2 * size_) % size_
                     : (rank_ + 1 - (s - (size_ - 1)) + 2 * size_) % size_;
}

int RingAllreduce::recv_chunk(int s) const {
  return reducing(s) ? (rank_ - s - 1 + 2 * size_) % size_
                     : (rank_ - (s - (size_ - 1)) + 2 * size_) % size_;
}

void RingAllreduce::post(int s, int64_t k) {
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  const int64_t first = k * segment_;
  const int rc = recv_chunk(s), sc = send_chunk(s);
  // A reduce-scatter step receives into the segment's slot of `incoming_` (then adds it into
  // the chunk); an allgather step receives straight into place. Empty segments still exchange a
  // message, so that both sides' message sequences stay in step.
  char* into = reducing(s) ? incoming_->data() + first * elem_ : chunk_ptr(rc) + first * elem_;
  mpi::check(MPI_Irecv(into, segment_count(rc, k), dt_, left, tag_, comm_, &reqs_[size_t(2 * k)]),
             "MPI_Irecv (ring allreduce)");
  mpi::check(MPI_Isend(chunk_ptr(sc) + first * elem_, segment_count(sc, k), dt_, right, tag_,
                       comm_, &reqs_[size_t(2 * k + 1)]),
             "MPI_Isend (ring allreduce)");
  step_of_[size_t(k)] = s;
}

void RingAllreduce::start() {
  if (size_ <= 1) return;
  reqs_.assign(size_t(2 * segments_), MPI_REQUEST_NULL);
  completed_.resize(reqs_.size());
  step_of_.assign(size_t(segments_), -1);
  finished_.assign(size_t(segments_), 0);
  next_step_ = 0;
  next_segment_ = 0;
  unfinished_ = segments_;
  // Step 0 of every segment at once: nothing to wait for yet.
  for (; next_segment_ < segments_; ++next_segment_) post(0, next_segment_);
  next_step_ = 1;
  next_segment_ = 0;
}

bool RingAllreduce::test() {
  if (size_ <= 1 || unfinished_ == 0) return true;
  int outcount = 0;
  mpi::check(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &outcount,
                          completed_.data(), MPI_STATUSES_IGNORE),
             "MPI_Testsome (ring allreduce)");
  if (outcount == MPI_UNDEFINED) outcount = 0;  // every request already completed
  for (int i = 0; i < outcount; ++i) {
    const int r = completed_[size_t(i)];
    const int64_t k = r / 2;
    const int s = step_of_[size_t(k)];
    if (r % 2 == 0 && reducing(s)) {
      // A received segment: add it into this rank's copy of the chunk while it is in cache.
      const int64_t first = k * segment_;
      const int rc = recv_chunk(s);
      mpi::check(MPI_Reduce_local(incoming_->data() + first * elem_, chunk_ptr(rc) + first * elem_,
                                  segment_count(rc, k), dt_, op_),
                 "MPI_Reduce_local (ring allreduce)");
    }
    // Both requests of a segment may complete in one call: count the segment once, when the
    // second one is seen (the first was set to MPI_REQUEST_NULL by this call or an earlier one).
    if (s == steps_ - 1 && !finished_[size_t(k)] && reqs_[size_t(2 * k)] == MPI_REQUEST_NULL &&
        reqs_[size_t(2 * k + 1)] == MPI_REQUEST_NULL) {
      finished_[size_t(k)] = 1;
      --unfinished_;
    }
  }
  // Post the next steps in (step, segment) order for as long as the segment at the front has
  // finished its previous step.
  while (next_step_ < steps_) {
    const size_t k = size_t(next_segment_);
    if (reqs_[2 * k] != MPI_REQUEST_NULL || reqs_[2 * k + 1] != MPI_REQUEST_NULL) break;
    post(next_step_, next_segment_);
    if (++next_segment_ == segments_) {
      next_segment_ = 0;
      ++next_step_;
    }
  }
  return unfinished_ == 0;
}

}  // namespace onyx::dist
