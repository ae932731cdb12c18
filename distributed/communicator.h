// Communicator: collectives over device buffers (allreduce, broadcast, allgather,
// reduce-scatter, barrier), asynchronous with completion handles. Two implementations:
// MPI on CPU buffers and NCCL on GPU buffers.
//
//   auto comm = onyx::dist::make_mpi_communicator();      // under mpirun -n N
//   auto work = comm->allreduce(grad, ReduceOp::Avg);      // returns at once
//   ... compute goes on while the reduction progresses ...
//   work->wait();                                          // grad now holds the average
//
// Element types: float32, float64, float16, bfloat16, int8, uint8, int32, int64. float16
// and bfloat16 are reduced pairwise in float and rounded back after every step (as NCCL
// does). Avg is Sum divided by size(); for integer types that is C++ integer division
// (truncation toward zero).
//
// MPI design: each communicator owns one communication thread that runs its collectives
// in issue order with MPI's non-blocking collectives (MPI_Iallreduce, ...; allreduce over
// point-to-point messages) on a private duplicate of MPI_COMM_WORLD, testing them until done,
// so reductions progress while the caller computes. A caller blocked in Work::wait() takes
// over and tests them itself (the thread stands back meanwhile), so a collective waited on at
// once costs what a blocking MPI call costs, without a hand-off between threads. MPI is initialised with MPI_THREAD_MULTIPLE (several communicators
// mean several threads in MPI at once); a lower level is an onyx::Error.
//
// Failure detection (MPI): the communication threads exchange a small heartbeat every
// 100 ms on a second duplicate, carrying how many collectives each rank has started. A
// collective that has not finished within the timeout fails with a message naming the
// ranks that have not started it and the ranks not heard from (dead or hung); from then
// on the communicator is broken and every call throws. After a peer was declared
// unresponsive MPI is not finalised at exit (MPI_Finalize would wait for it); mpirun then
// reports the job as failed and stops the remaining processes. Open MPI's own behaviour
// when a rank process dies (e.g. SIGKILL): mpirun notices at once, prints "mpirun noticed
// that process rank R ... exited on signal 9" and kills every other rank, usually before
// the timeout fires. A thread stuck inside one MPI call for the peer timeout (Open MPI's TCP
// transport can spin forever once a peer is gone) cannot be made to return: the MPI watchdog
// (mpi_watchdog.h) then ends the process with exit code 1 and the same diagnosis.
//
// Communicators are created and destroyed collectively: every rank makes the same
// sequence of make_*_communicator() calls and destroys them in the same order.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "graph/tensor.h"

namespace onyx::dist {

enum class ReduceOp { Sum, Avg, Max };

/// "sum", "avg", "max".
std::string reduce_op_name(ReduceOp op);

/// Completion handle of an asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until done; onyx::Error when it failed or did not finish within the
  /// communicator's timeout (the message names the collective, its size, and the ranks
  /// that did not respond when known).
  virtual void wait() = 0;
  /// Non-blocking: true when done (throws like wait() on failure).
  virtual bool test() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Rank among the processes of this host.
  virtual int local_rank() const = 0;
  /// "mpi" or "nccl".
  virtual std::string backend() const = 0;
  /// In place: every rank ends with op over all ranks' `t` (same dtype/shape on all ranks).
  /// Tensors live in the backend's memory (CPU for MPI, GPU for NCCL) and must stay
  /// untouched until the work is done. Collectives are issued in the same order on every
  /// rank and complete in issue order.
  virtual WorkHandle allreduce(Tensor& t, ReduceOp op) = 0;
  /// In place: every rank ends with rank `root`'s `t`.
  virtual WorkHandle broadcast(Tensor& t, int root) = 0;
  /// out has size() * in.numel() elements: rank r's `in` at offset r * in.numel().
  virtual WorkHandle allgather(const Tensor& in, Tensor& out) = 0;
  /// in has size() * out.numel() elements; rank r gets op over ranks of block r.
  virtual WorkHandle reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  /// Returns when every rank has called barrier() (throws like Work::wait()).
  virtual void barrier() = 0;
  /// How long a collective may take before a peer is declared dead (default 60 s; the
  /// environment variable ONYX_COMM_TIMEOUT, in seconds, overrides the default).
  virtual void set_timeout(std::chrono::milliseconds t) = 0;
  /// How long a peer may go without a heartbeat before it is declared dead or hung (default
  /// 10 s; ONYX_PEER_TIMEOUT, in seconds, overrides it). A dead (SIGKILL) or stopped (SIGSTOP)
  /// rank is named within this time, while a collective that is merely slow, every peer still
  /// sending heartbeats, runs until the collective timeout. Backends without a heartbeat
  /// (NCCL: its kernels run on the device) rely on set_timeout alone and ignore this.
  virtual void set_peer_timeout(std::chrono::milliseconds) {}
};

/// True when this process was started by mpirun (Open MPI / PMIx environment variables).
bool launched_by_mpi();

/// MPI communicator over (a duplicate of) MPI_COMM_WORLD; initialises MPI once
/// (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, onyx::Error if not provided) and
/// finalises it at exit.
std::unique_ptr<Communicator> make_mpi_communicator();

/// NCCL communicator: the unique id is made on rank 0 and broadcast over MPI, the device
/// is local_rank % device count, collectives run on a dedicated stream. onyx::Error
/// "[nccl] built without NCCL" from builds without it, "[nccl] no CUDA device" when none.
std::unique_ptr<Communicator> make_nccl_communicator();

}  // namespace onyx::dist
