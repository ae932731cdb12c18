// Argument checks and descriptions shared by the Communicator backends, so MPI and NCCL
// reject bad input with the same messages ("[mpi] ..." / "[nccl] ...").
#pragma once

#include <chrono>
#include <string>

#include "distributed/communicator.h"
#include "graph/tensor.h"

namespace onyx::dist {

/// Throws unless `t` is defined, of a supported dtype and on `device`.
void check_tensor(const std::string& backend, const char* collective, const char* what,
                  const Tensor& t, DeviceType device);
/// out.numel() == size * in.numel() and same dtype.
void check_allgather(const std::string& backend, const Tensor& in, const Tensor& out, int size);
/// in.numel() == size * out.numel() and same dtype.
void check_reduce_scatter(const std::string& backend, const Tensor& in, const Tensor& out,
                          int size);
/// 0 <= root < size.
void check_root(const std::string& backend, int root, int size);
/// Positive timeout.
void check_timeout(const std::string& backend, std::chrono::milliseconds t);

/// "1000 x float"
std::string describe(const Tensor& t);
/// 60 s, or ONYX_COMM_TIMEOUT seconds (a positive number; onyx::Error otherwise).
std::chrono::milliseconds default_timeout();
/// 10 s, or ONYX_PEER_TIMEOUT seconds: how long a peer may stay silent (no heartbeat) before it
/// is declared dead or hung, whatever the collective timeout.
std::chrono::milliseconds default_peer_timeout();

/// How the MPI communicator runs allreduce: true (the default, or ONYX_MPI_ALLREDUCE=ring) for
/// its point-to-point schedules (p2p_allreduce.h: recursive doubling or a ring), false with
/// ONYX_MPI_ALLREDUCE=mpi for MPI_Iallreduce; any other value is an error naming both.
bool ring_allreduce_from_env();

}  // namespace onyx::dist
