// The communicator every rank of onyx_distributed_tests shares (made in mpi_test_main.cpp).
#pragma once

#include "distributed/communicator.h"

namespace onyx::dist::test {

/// The shared MPI communicator (timeout 30 s, so a rank that fails a test and skips a
/// collective makes the others fail instead of hang).
Communicator& world();

}  // namespace onyx::dist::test
