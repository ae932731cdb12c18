#include "distributed/mpi_watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace onyx::dist {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             MpiWatchdog::Clock::now().time_since_epoch())
      .count();
}
}  // namespace

MpiWatchdog::MpiWatchdog(Limit limit, OnStuck on_stuck, std::chrono::milliseconds tick)
    : limit_(std::move(limit)), on_stuck_(std::move(on_stuck)), tick_(tick) {
  thread_ = std::thread([this] { run(); });
}

MpiWatchdog::~MpiWatchdog() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MpiWatchdog::enter(std::chrono::milliseconds extra) {
  extra_ms_.store(extra.count(), std::memory_order_relaxed);
  entered_ns_.store(now_ns(), std::memory_order_relaxed);
  state_.fetch_add(1, std::memory_order_release);  // even -> odd: inside
}

void MpiWatchdog::leave() { state_.fetch_add(1, std::memory_order_release); }

void MpiWatchdog::set_context(std::string what) {
  std::lock_guard lk(mu_);
  context_ = std::move(what);
}

void MpiWatchdog::end_process(const std::string& message) {
  std::fprintf(stderr, "onyx: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

void MpiWatchdog::run() {
  uint64_t seen = 0;     // the state at the previous tick
  int64_t ticks = 0;     // consecutive ticks the same call was seen inside MPI
  uint64_t fired = 0;    // the call already reported (once per call)
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, tick_, [this] { return stop_; })) {
    uint64_t state = state_.load(std::memory_order_acquire);
    bool inside = (state & 1) != 0;
    ticks = inside && state == seen ? ticks + 1 : 0;
    seen = state;
    if (!inside || state == fired) continue;
    auto limit = limit_() + std::chrono::milliseconds(extra_ms_.load(std::memory_order_relaxed));
    if (ticks * tick_ < limit) continue;
    fired = state;
    double stuck_s =
        static_cast<double>(now_ns() - entered_ns_.load(std::memory_order_relaxed)) * 1e-9;
    std::string context = context_;
    lk.unlock();  // the stuck thread may still set a context
    on_stuck_(stuck_s, context);
    lk.lock();
  }
}

}  // namespace onyx::dist
