// A thread stuck inside one MPI call. Open MPI 4.1's TCP transport can spin forever in its
// event loop once a peer has died (seen: MPI_Test never returning, 100 % CPU in libevent's
// evmap_io_active_, about one run in six of a killed rank with --enable-recovery), and
// nothing in the process can make that call return: the collective's deadline and the
// heartbeat are checked between MPI calls, never during one. The watchdog, a thread that
// never calls MPI, notices a call that has not returned within the limit and ends the
// process with onyx's diagnosis (as PyTorch's NCCL watchdog takes the process down) instead
// of leaving it to hang silently.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace onyx::dist {

class MpiWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  /// How long one call may run; read at every tick (it follows the peer timeout).
  using Limit = std::function<std::chrono::milliseconds()>;
  /// Runs once per stuck call, on the watchdog's thread, with the seconds since the call
  /// began and the context set last. Must not call MPI. The communicator's ends the process
  /// (end_process).
  using OnStuck = std::function<void(double stuck_s, const std::string& context)>;

  /// The limit is counted in ticks the watchdog itself saw, so a process stopped (SIGSTOP, a
  /// debugger) or starved of CPU does not count the time it was not running.
  MpiWatchdog(Limit limit, OnStuck on_stuck,
              std::chrono::milliseconds tick = std::chrono::milliseconds(100));
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  /// The calling thread is inside MPI until leave(); `extra` lengthens the limit for a
  /// stretch with a deadline of its own. One thread at a time (the communicator's step lock).
  void enter(std::chrono::milliseconds extra = std::chrono::milliseconds(0));
  void leave();
  /// Marks a scope as inside MPI.
  class Scope {
   public:
    explicit Scope(MpiWatchdog& w, std::chrono::milliseconds extra = std::chrono::milliseconds(0))
        : w_(w) {
      w_.enter(extra);
    }
    ~Scope() { w_.leave(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    MpiWatchdog& w_;
  };

  /// What the calls are working on, for the report (the collective in flight).
  void set_context(std::string what);

  /// Prints "onyx: <message>" to stderr and ends the process with exit code 1 at once: no
  /// destructors, no atexit handlers, no MPI_Finalize (each would wait on the stuck call).
  [[noreturn]] static void end_process(const std::string& message);

 private:
  void run();

  Limit limit_;
  OnStuck on_stuck_;
  const std::chrono::milliseconds tick_;
  // (calls entered << 1) | inside: a new value means a new call or none in progress.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> entered_ns_{0};  // Clock's ns when the current call began
  std::atomic<int64_t> extra_ms_{0};
  std::mutex mu_;  // context_, stop_
  std::condition_variable cv_;
  std::string context_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace onyx::dist
