// MpiWatchdog: a call into MPI that does not return within the limit is reported once (the
// communicator's report ends the process); short calls and time outside MPI never are.
// Margins are wide: every rank of the job runs these at once on a shared machine.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "distributed/mpi_watchdog.h"

namespace onyx::dist {
namespace {

using namespace std::chrono_literals;

struct Reports {
  std::atomic<int> count{0};
  std::atomic<double> last_s{0};
  std::string last_context;  // written before count, read after it
  MpiWatchdog::OnStuck record() {
    return [this](double s, const std::string& context) {
      last_s.store(s);
      last_context = context;
      count.fetch_add(1);
    };
  }
  // Waits until `n` reports arrived or `within` passed.
  bool wait_for(int n, std::chrono::milliseconds within) {
    auto end = std::chrono::steady_clock::now() + within;
    while (count.load() < n && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(5ms);
    return count.load() >= n;
  }
};

TEST(MpiWatchdog, ReportsACallStuckPastTheLimitOnce) {
  Reports r;
  MpiWatchdog w([] { return 200ms; }, r.record(), 20ms);
  w.set_context("allreduce (4 x float, sum) (collective #7)");
  w.enter();
  ASSERT_TRUE(r.wait_for(1, 10s)) << "a call inside MPI for 10 s was never reported";
  EXPECT_GE(r.last_s.load(), 0.2);
  std::this_thread::sleep_for(300ms);  // still stuck: no second report for the same call
  w.leave();
  EXPECT_EQ(r.count.load(), 1);
  EXPECT_EQ(r.last_context, "allreduce (4 x float, sum) (collective #7)");
}

TEST(MpiWatchdog, EachStuckCallIsReported) {
  Reports r;
  MpiWatchdog w([] { return 100ms; }, r.record(), 20ms);
  for (int call = 1; call <= 2; ++call) {
    MpiWatchdog::Scope in_mpi(w);
    ASSERT_TRUE(r.wait_for(call, 10s)) << "stuck call " << call << " was not reported";
  }
  EXPECT_EQ(r.count.load(), 2);
}

TEST(MpiWatchdog, ShortCallsAndTimeOutsideMpiAreNeverReported) {
  Reports r;
  MpiWatchdog w([] { return 1000ms; }, r.record(), 20ms);
  std::this_thread::sleep_for(300ms);  // outside MPI: nothing to watch
  auto end = std::chrono::steady_clock::now() + 1500ms;  // longer than the limit in all
  while (std::chrono::steady_clock::now() < end) {
    MpiWatchdog::Scope in_mpi(w);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(r.count.load(), 0);
}

TEST(MpiWatchdog, ExtraTimeLengthensTheLimitOfOneStretch) {
  Reports r;
  MpiWatchdog w([] { return 100ms; }, r.record(), 20ms);
  {
    MpiWatchdog::Scope closing(w, 3000ms);  // e.g. waiting for the peers' goodbyes
    std::this_thread::sleep_for(600ms);
    EXPECT_EQ(r.count.load(), 0) << "reported before the extra time was up";
  }
  MpiWatchdog::Scope in_mpi(w);  // the next call has the plain limit again
  EXPECT_TRUE(r.wait_for(1, 10s));
}

TEST(MpiWatchdog, TheLimitIsReadAgainAtEveryTick) {
  Reports r;
  std::atomic<int64_t> limit_ms{60000};
  MpiWatchdog w([&] { return std::chrono::milliseconds(limit_ms.load()); }, r.record(), 20ms);
  MpiWatchdog::Scope in_mpi(w);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(r.count.load(), 0);
  limit_ms = 100;  // set_peer_timeout while a call is stuck
  EXPECT_TRUE(r.wait_for(1, 10s));
}

TEST(MpiWatchdogDeathTest, EndProcessNamesTheCauseAndExitsWithOne) {
  GTEST_FLAG_SET(death_test_style, "fast");  // the child only prints and exits
  EXPECT_EXIT(MpiWatchdog::end_process("[mpi] rank 3: stuck"), testing::ExitedWithCode(1),
              "onyx: \\[mpi\\] rank 3: stuck");
}

}  // namespace
}  // namespace onyx::dist
