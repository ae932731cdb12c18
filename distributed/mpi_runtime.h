// Process-wide MPI state for the MPI communicator: initialisation once with
// MPI_THREAD_MULTIPLE, finalisation at exit, the one checking wrapper every MPI call goes
// through, and the mapping of onyx dtypes and reduce ops to MPI (with our own ops for
// float16 and bfloat16, which MPI lacks).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>

#include "distributed/communicator.h"
#include "graph/dtype.h"

namespace onyx::dist::mpi {

/// Initialises MPI unless it already is (then checks its thread level); registers
/// MPI_Finalize at exit when it initialised it. onyx::Error when the MPI library cannot
/// provide MPI_THREAD_MULTIPLE.
void ensure_initialized();

/// Throws onyx::Error "[mpi] <call> failed: <MPI's error string>" unless rc is MPI_SUCCESS.
void check(int rc, const char* call);

/// MPI datatype of a supported dtype (MPI_UINT16_T for float16 and bfloat16: our ops
/// interpret the bits).
MPI_Datatype datatype(DataType dt);
/// Reduction op for `op` over `dt`; Avg maps to the sum (the caller divides by size).
MPI_Op reduce_op(ReduceOp op, DataType dt);

/// Rank among the processes of this host (from a shared-memory split of MPI_COMM_WORLD).
int local_rank();
/// Number of this job's processes on this host.
int local_size();

/// A peer stopped responding: at exit MPI is left unfinalised (MPI_Finalize would wait for
/// the peer) so the process can end and mpirun can report the failure.
void mark_peer_unresponsive();

/// Keeps `state` allocated until the process ends: what abandoned MPI requests may still read
/// or write (their buffers, the objects holding them). MPI cannot cancel a collective, and a
/// late peer's message must not land in freed memory.
void keep_until_exit(std::shared_ptr<void> state);

/// Runs `fn` at exit before MPI_Finalize (a communicator stops its thread there); returns
/// an id for cancel_at_finalize().
int at_finalize(std::function<void()> fn);
void cancel_at_finalize(int id);

}  // namespace onyx::dist::mpi
