#include "distributed/recursive_doubling_allreduce.h"

#include <utility>

#include "distributed/mpi_runtime.h"

namespace onyx::dist {

RecursiveDoublingAllreduce::RecursiveDoublingAllreduce(void* buf, int64_t count, MPI_Datatype dt,
                                                       MPI_Op op, MPI_Comm comm, int tag,
                                                       std::shared_ptr<std::vector<char>> incoming)
    : buf_(static_cast<char*>(buf)),
      count_(static_cast<int>(count)),  // at most kRecursiveDoublingMaxBytes
      dt_(dt),
      op_(op),
      comm_(comm),
      tag_(tag),
      incoming_(std::move(incoming)) {
  int elem = 0;
  mpi::check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  mpi::check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  mpi::check(MPI_Type_size(dt, &elem), "MPI_Type_size");
  const size_t need = static_cast<size_t>(count) * static_cast<size_t>(elem);
  if (incoming_->size() < need) incoming_->resize(need);
}

void RecursiveDoublingAllreduce::start() {
  distance_ = 1;
  if (size_ > 1) post();
}

void RecursiveDoublingAllreduce::post() {
  const int partner = rank_ ^ distance_;
  mpi::check(MPI_Irecv(incoming_->data(), count_, dt_, partner, tag_, comm_, &reqs_[0]),
             "MPI_Irecv (recursive doubling allreduce)");
  mpi::check(MPI_Isend(buf_, count_, dt_, partner, tag_, comm_, &reqs_[1]),
             "MPI_Isend (recursive doubling allreduce)");
}

bool RecursiveDoublingAllreduce::test() {
  if (size_ <= 1) return true;
  int done = 0;
  mpi::check(MPI_Testall(2, reqs_, &done, MPI_STATUSES_IGNORE),
             "MPI_Testall (recursive doubling allreduce)");
  if (!done) return false;
  // The send has completed, so buf_ may change now.
  mpi::check(MPI_Reduce_local(incoming_->data(), buf_, count_, dt_, op_),
             "MPI_Reduce_local (recursive doubling allreduce)");
  distance_ *= 2;
  if (distance_ >= size_) return true;
  post();
  return false;
}

}  // namespace onyx::dist
