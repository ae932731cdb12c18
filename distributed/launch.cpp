// launched_by_mpi(): looks at the environment mpirun (Open MPI / PMIx / MPICH) sets.
#include <cstdlib>

#include "distributed/communicator.h"

namespace onyx::dist {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

}  // namespace onyx::dist
