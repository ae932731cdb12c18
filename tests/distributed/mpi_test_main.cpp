// main() of onyx_distributed_tests, run by mpirun: every rank runs every test; ranks other
// than 0 print only their failures, prefixed with their rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "mpi_test_main.h"

namespace onyx::dist::test {
namespace {

std::unique_ptr<Communicator> g_world;

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s at %s:%d\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  int rank_;
  std::string test_;  // current_test_info() would deadlock here (gtest holds its lock)
};

}  // namespace

Communicator& world() { return *g_world; }

}  // namespace onyx::dist::test

int main(int argc, char** argv) {
  using namespace onyx::dist;
  testing::InitGoogleTest(&argc, argv);
  test::g_world = make_mpi_communicator();
  test::g_world->set_timeout(std::chrono::seconds(30));
  if (test::g_world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new test::RankFailurePrinter(test::g_world->rank()));
  }
  int rc = RUN_ALL_TESTS();
  test::g_world.reset();  // collective: every rank gets here
  return rc;
}
