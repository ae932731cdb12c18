// Builds without NCCL: make_nccl_communicator() says so instead of failing obscurely.
#include <gtest/gtest.h>

#include "distributed/communicator.h"
#include "graph/error.h"

TEST(NcclStub, SaysBuiltWithoutNccl) {
  try {
    onyx::dist::make_nccl_communicator();
    ADD_FAILURE() << "the stub returned a communicator";
  } catch (const onyx::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[nccl] built without NCCL"), std::string::npos)
        << e.what();
  }
}
