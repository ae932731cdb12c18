// make_nccl_communicator() for builds without CUDA or NCCL.
#include "distributed/communicator.h"
#include "graph/error.h"

namespace onyx::dist {

std::unique_ptr<Communicator> make_nccl_communicator() {
  ONYX_THROW("[nccl] built without NCCL (configure with the CUDA toolkit and NCCL installed and "
             "ONYX_WITH_NCCL=ON)");
}

}  // namespace onyx::dist
