// The MPI Communicator: a queue of collectives run in issue order with MPI's non-blocking
// collectives (allreduce: point-to-point messages, p2p_allreduce.h), a heartbeat for failure
// diagnosis, and a per-collective deadline (see communicator.h for the design). The
// communication thread progresses them while the caller computes; a caller blocked in
// Work::wait() progresses them itself (ProgressLink), so a collective waited on at once runs in
// one thread, without a hand-off to the communication thread and back.
#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <memory>
#include <optional>
#include <thread>

#include "distributed/collective_checks.h"
#include "distributed/heartbeat.h"
#include "distributed/mpi_runtime.h"
#include "distributed/mpi_watchdog.h"
#include "distributed/p2p_allreduce.h"
#include "graph/error.h"

namespace onyx::dist {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kBackend = "mpi";
/// How long the communication thread yield-polls an empty queue before it sleeps on it.
constexpr auto kSpin = std::chrono::microseconds(100);

/// One round of progress on the communicator's collectives (MpiCommunicator::step).
enum class Step {
  Idle,        // nothing queued, nothing in flight
  InFlight,    // a collective in flight did not finish this round
  Progressed,  // a collective started, finished or failed
  Stopped,     // nothing left and the communicator is shutting down
};

/// Who progresses the collectives: the communication thread or a caller blocked in
/// Work::wait(), one at a time (`mu`). Shared by the communicator and its Work handles, so a
/// handle that outlives its communicator finds `step` empty instead of a destroyed object.
struct ProgressLink {
  std::mutex mu;                 // held while progressing
  std::function<Step()> step;    // the communicator's step(); empty once it is gone
  std::atomic<int> waiters{0};   // callers driving (or about to): the thread stands back
  /// MPI_Test rounds a driving caller spins through before it yields: none when this host
  /// runs more ranks than it has cores, where a spinning rank keeps its peer off the core.
  int spin_rounds = 2000;
};

/// Completion state of one queued collective, shared by the caller and the thread.
class MpiWork : public Work {
 public:
  /// `last_loop` is when a progressing thread last went round (a thread stuck inside MPI for
  /// longer than `stuck_after` fails wait()).
  MpiWork(std::string what, std::shared_ptr<std::atomic<int64_t>> last_loop,
          std::shared_ptr<std::atomic<int64_t>> timeout_ms, std::shared_ptr<ProgressLink> link)
      : what_(std::move(what)),
        last_loop_(std::move(last_loop)),
        timeout_ms_(std::move(timeout_ms)),
        link_(std::move(link)) {}

  void wait() override {
    drive();
    std::unique_lock lk(mu_);
    while (!done_) {
      cv_.wait_for(lk, std::chrono::milliseconds(200));
      int64_t idle_ms = (Clock::now().time_since_epoch().count() - last_loop_->load()) / 1000000;
      if (!done_ && idle_ms > *timeout_ms_ + 10000) {
        ONYX_THROW("[mpi] {}: the communication thread has been stuck inside MPI for {} ms", what_,
                   idle_ms);
      }
    }
    if (!error_.empty()) throw Error(error_);
  }
  bool test() override {
    std::lock_guard lk(mu_);
    if (!error_.empty()) throw Error(error_);
    return done_;
  }
  /// Called by the progressing thread: success when `error` is empty.
  void finish(std::string error) {
    {
      std::lock_guard lk(mu_);
      done_ = true;
      error_ = std::move(error);
    }
    done_flag_.store(true, std::memory_order_release);
    cv_.notify_all();
  }
  const std::string& what() const { return what_; }

 private:
  /// Progresses the queue from this thread until this collective is done, as a blocking
  /// MPI_Allreduce would: MPI_Tests back to back while messages flow, then yields, then short
  /// sleeps while a peer lags. Returns early only when the communicator is gone (the thread
  /// finished every collective before that, so done_ is set or about to be).
  void drive() {
    link_->waiters.fetch_add(1);
    int idle = 0;
    while (!done_flag_.load(std::memory_order_acquire)) {
      Step st = Step::InFlight;
      if (link_->mu.try_lock()) {
        std::lock_guard lk(link_->mu, std::adopt_lock);
        if (!link_->step) break;
        st = link_->step();
      }
      if (st == Step::Progressed) {
        idle = 0;
      } else if (++idle < link_->spin_rounds) {
        cpu_relax();
      } else if (idle < 20000) {  // also the first rounds when oversubscribed
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    link_->waiters.fetch_sub(1);
  }
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  std::string what_;
  std::shared_ptr<std::atomic<int64_t>> last_loop_, timeout_ms_;
  std::shared_ptr<ProgressLink> link_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};  // done_, readable without the mutex
  std::string error_;
};

enum class Kind { Allreduce, Broadcast, Allgather, ReduceScatter, Barrier };

struct Collective {
  Kind kind;
  Tensor in, out;  // in-place collectives use `out` only
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::shared_ptr<MpiWork> work;
  int64_t seq = 0;
  MPI_Request req = MPI_REQUEST_NULL;
  std::unique_ptr<P2pAllreduce> ring;  // an allreduce run over point-to-point messages, not req
  Clock::time_point started;
};

// What a communicator that could not shut down cleanly leaves to MPI (keep_until_exit).
struct Leftovers {
  std::unique_ptr<Heartbeat> heartbeat;
  std::vector<Collective> collectives;
  std::shared_ptr<std::vector<char>> ring_buffer;
};

template <typename T>
void divide(Tensor& t, int n) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(acc_t<T>(p[i]) / acc_t<T>(n));
}

void divide_in_place(Tensor& t, int n) {
  switch (t.dtype()) {
    case DataType::Float:
      return divide<float>(t, n);
    case DataType::Double:
      return divide<double>(t, n);
    case DataType::Float16:
      return divide<float16>(t, n);
    case DataType::BFloat16:
      return divide<bfloat16>(t, n);
    case DataType::Int8:
      return divide<int8_t>(t, n);
    case DataType::UInt8:
      return divide<uint8_t>(t, n);
    case DataType::Int32:
      return divide<int32_t>(t, n);
    case DataType::Int64:
      return divide<int64_t>(t, n);
    default:
      ONYX_THROW("[mpi] avg: unsupported dtype {}", dtype_name(t.dtype()));
  }
}

int mpi_count(const char* coll, const Tensor& t) {
  ONYX_CHECK(t.numel() <= INT_MAX,
             "[mpi] {}: {} elements exceed MPI's limit of {} elements per call", coll, t.numel(),
             INT_MAX);
  return static_cast<int>(t.numel());
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    mpi::ensure_initialized();
    mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    for (MPI_Comm* c : {&coll_comm_, &hb_comm_}) {
      mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, c), "MPI_Comm_dup");
      mpi::check(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    }
    timeout_ms_->store(default_timeout().count());
    ring_allreduce_ = ring_allreduce_from_env();
    peer_timeout_ms_.store(default_peer_timeout().count());
    touch();
    heartbeat_ = std::make_unique<Heartbeat>(hb_comm_, rank_, size_);
    watchdog_ = std::make_unique<MpiWatchdog>(
        [this] { return stuck_limit(); },
        // The heartbeat object outlives the watchdog (kept until exit or freed after it).
        [this, hb = heartbeat_.get()](double s, const std::string& context) {
          stuck(*hb, s, context);
        });
    link_->step = [this] { return step(); };
    if (mpi::local_size() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency())))
      link_->spin_rounds = 0;
    thread_ = std::thread([this] { run(); });
    finalize_hook_ = mpi::at_finalize([this] { stop(); });
  }
  ~MpiCommunicator() override {
    mpi::cancel_at_finalize(finalize_hook_);
    stop();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return mpi::local_rank(); }
  std::string backend() const override { return kBackend; }

  WorkHandle allreduce(Tensor& t, ReduceOp op) override {
    check_tensor(kBackend, "allreduce", "tensor", t, DeviceType::CPU);
    mpi_count("allreduce", t);
    return enqueue({Kind::Allreduce, {}, t, op},
                   fmt::format("allreduce ({}, {})", describe(t), reduce_op_name(op)));
  }
  WorkHandle broadcast(Tensor& t, int root) override {
    check_tensor(kBackend, "broadcast", "tensor", t, DeviceType::CPU);
    check_root(kBackend, root, size_);
    mpi_count("broadcast", t);
    return enqueue({Kind::Broadcast, {}, t, ReduceOp::Sum, root},
                   fmt::format("broadcast ({}, root {})", describe(t), root));
  }
  WorkHandle allgather(const Tensor& in, Tensor& out) override {
    check_tensor(kBackend, "allgather", "input", in, DeviceType::CPU);
    check_tensor(kBackend, "allgather", "output", out, DeviceType::CPU);
    check_allgather(kBackend, in, out, size_);
    mpi_count("allgather", in);
    return enqueue({Kind::Allgather, in, out}, fmt::format("allgather ({})", describe(in)));
  }
  WorkHandle reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_tensor(kBackend, "reduce_scatter", "input", in, DeviceType::CPU);
    check_tensor(kBackend, "reduce_scatter", "output", out, DeviceType::CPU);
    check_reduce_scatter(kBackend, in, out, size_);
    mpi_count("reduce_scatter", out);
    return enqueue({Kind::ReduceScatter, in, out, op},
                   fmt::format("reduce_scatter ({}, {})", describe(in), reduce_op_name(op)));
  }
  void barrier() override { enqueue({Kind::Barrier}, "barrier")->wait(); }
  void set_timeout(std::chrono::milliseconds t) override {
    check_timeout(kBackend, t);
    timeout_ms_->store(t.count());
  }
  void set_peer_timeout(std::chrono::milliseconds t) override {
    check_timeout(kBackend, t);
    peer_timeout_ms_.store(t.count());
  }

 private:
  WorkHandle enqueue(Collective c, std::string what) {
    auto work = std::make_shared<MpiWork>(std::move(what), last_loop_, timeout_ms_, link_);
    c.work = work;
    {
      std::lock_guard lk(mu_);
      ONYX_CHECK(broken_.empty(), "[mpi] {}: the communicator is broken by an earlier failure: {}",
                 c.work->what(), broken_);
      ONYX_CHECK(!stopping_, "[mpi] {}: the communicator is shutting down", c.work->what());
      queue_.push_back(std::move(c));
    }
    cv_.notify_one();
    return work;
  }

  void touch() { last_loop_->store(Clock::now().time_since_epoch().count()); }

  // Starts the non-blocking MPI call of `c`.
  void start(Collective& c) {
    c.seq = ++started_;
    c.started = Clock::now();
    watchdog_->set_context(fmt::format("{} (collective #{})", c.work->what(), c.seq));
    MPI_Datatype dt = c.kind == Kind::Barrier ? MPI_BYTE : mpi::datatype(c.out.dtype());
    switch (c.kind) {
      case Kind::Allreduce:
        if (ring_allreduce_ && size_ > 1) {
          c.ring = make_p2p_allreduce(c.out.raw(), c.out.numel(), dt,
                                      mpi::reduce_op(c.op, c.out.dtype()), c.op != ReduceOp::Max,
                                      coll_comm_, static_cast<int>(c.seq % 32000), ring_buffer_);
          if (c.ring) {
            c.ring->start();
            break;
          }
        }
        mpi::check(MPI_Iallreduce(MPI_IN_PLACE, c.out.raw(), int(c.out.numel()), dt,
                                  mpi::reduce_op(c.op, c.out.dtype()), coll_comm_, &c.req),
                   "MPI_Iallreduce");
        break;
      case Kind::Broadcast:
        mpi::check(MPI_Ibcast(c.out.raw(), int(c.out.numel()), dt, c.root, coll_comm_, &c.req),
                   "MPI_Ibcast");
        break;
      case Kind::Allgather:
        mpi::check(MPI_Iallgather(c.in.raw(), int(c.in.numel()), dt, c.out.raw(), int(c.in.numel()),
                                  dt, coll_comm_, &c.req),
                   "MPI_Iallgather");
        break;
      case Kind::ReduceScatter:
        mpi::check(
            MPI_Ireduce_scatter_block(c.in.raw(), c.out.raw(), int(c.out.numel()), dt,
                                      mpi::reduce_op(c.op, c.out.dtype()), coll_comm_, &c.req),
            "MPI_Ireduce_scatter_block");
        break;
      case Kind::Barrier:
        mpi::check(MPI_Ibarrier(coll_comm_, &c.req), "MPI_Ibarrier");
        break;
    }
  }

  // After a failure: the communicator is broken, queued work fails, the running request is
  // abandoned (MPI cannot cancel a collective).
  void fail(Collective& c, const std::string& message) {
    fail_queued(message);  // first, so a caller woken by finish() already sees it broken
    c.work->finish(message);
  }
  void fail_queued(const std::string& message) {
    std::deque<Collective> dropped;
    {
      std::lock_guard lk(mu_);
      if (broken_.empty()) broken_ = message;
      dropped.swap(queue_);
    }
    for (Collective& d : dropped) {
      d.work->finish(
          fmt::format("[mpi] {}: not run, the communicator is broken by an earlier "
                      "failure: {}",
                      d.work->what(), message));
    }
  }

  // Keeps an abandoned collective: its requests stay posted (MPI cannot cancel a collective),
  // so its tensors and ring (with the buffers they may still write into) stay allocated.
  void abandon(Collective& c) { abandoned_.push_back(std::move(c)); }

  // One round of progress, called with link_->mu held by the communication thread or by a
  // caller in Work::wait(): starts the next queued collective, or tests the one in flight and
  // fails it when a peer went silent or its deadline passed.
  Step step() {
    touch();
    MpiWatchdog::Scope in_mpi(*watchdog_);
    try {
      if (heartbeat_ok_) heartbeat_->poll(started_);
      if (!active_) {
        std::unique_lock lk(mu_);
        if (queue_.empty()) return stopping_ ? Step::Stopped : Step::Idle;
        active_ = std::move(queue_.front());
        queue_.pop_front();
        if (!broken_.empty()) {  // queued after the failure
          std::string why = broken_;
          lk.unlock();
          active_->work->finish(
              fmt::format("[mpi] {}: not run, the communicator is broken by "
                          "an earlier failure: {}",
                          active_->work->what(), why));
          active_.reset();
          return Step::Progressed;
        }
        lk.unlock();
        start(*active_);
        return Step::Progressed;
      }
      int done = 0;
      if (active_->ring)
        done = active_->ring->test();
      else
        mpi::check(MPI_Test(&active_->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) {
        if (active_->op == ReduceOp::Avg &&
            (active_->kind == Kind::Allreduce || active_->kind == Kind::ReduceScatter)) {
          divide_in_place(active_->out, size_);
        }
        active_->work->finish("");
        active_.reset();
        return Step::Progressed;
      }
      // A peer silent for the peer timeout is dead or stopped: fail now rather than wait out
      // the collective timeout (60 s by default). A slow collective is not silent: every
      // communicator keeps sending heartbeats while its collectives run.
      auto peer_timeout = std::chrono::milliseconds(peer_timeout_ms_.load());
      if (heartbeat_ok_ && heartbeat_->any_silent(peer_timeout)) {
        mpi::mark_peer_unresponsive();
        fail(*active_,
             fmt::format("[mpi] {} (collective #{}) abandoned after {:.1f} s on rank {}: {} "
                         "(a peer silent for {:.1f} s is declared dead; ONYX_PEER_TIMEOUT)",
                         active_->work->what(), active_->seq,
                         std::chrono::duration<double>(Clock::now() - active_->started).count(),
                         rank_, heartbeat_->diagnose(active_->seq, peer_timeout),
                         peer_timeout.count() / 1000.0));
        abandon(*active_);
        active_.reset();
        return Step::Progressed;
      }
      auto timeout = std::chrono::milliseconds(timeout_ms_->load());
      if (Clock::now() - active_->started > timeout) {
        auto silent = std::clamp(timeout / 2, std::chrono::milliseconds(500),
                                 std::chrono::milliseconds(10000));
        std::string why = heartbeat_->diagnose(active_->seq, silent);
        if (heartbeat_->any_silent(silent)) mpi::mark_peer_unresponsive();
        fail(*active_,
             fmt::format("[mpi] {} (collective #{}) did not complete within {:.1f} s "
                         "on rank {}: {}",
                         active_->work->what(), active_->seq, timeout.count() / 1000.0, rank_,
                         why.empty() ? "every peer is alive and has started it" : why));
        abandon(*active_);
        active_.reset();
        return Step::Progressed;
      }
      return Step::InFlight;
    } catch (const Error& e) {
      // An MPI error (e.g. a peer's connection lost): nothing on this communicator can work.
      heartbeat_ok_ = false;
      if (active_) {
        fail(*active_,
             fmt::format("[mpi] {} on rank {}: {}", active_->work->what(), rank_, e.what()));
        abandon(*active_);  // its buffers stay while requests may write
        active_.reset();
      } else {
        fail_queued(e.what());
      }
      return Step::Progressed;
    }
  }

  void run() {
    int idle_polls = 0;
    Clock::time_point idle_since = Clock::now();
    while (true) {
      // A caller blocked in Work::wait() drives the queue itself (MpiWork::drive): stand back
      // instead of taking turns with it for the core. Collectives queued behind the waited one
      // start at most this sleep after the caller stops driving.
      if (link_->waiters.load() > 0) {
        touch();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      Step st;
      {
        std::lock_guard dl(link_->mu);
        st = step();
      }
      if (st == Step::Stopped) break;
      if (st == Step::Progressed) {
        idle_polls = 0;
        idle_since = Clock::now();
        continue;
      }
      if (st == Step::Idle) {
        // The next collective often follows at once (the next bucket, the next step):
        // yield-poll briefly before sleeping.
        if (Clock::now() - idle_since < kSpin) {
          std::this_thread::yield();
        } else {
          std::unique_lock lk(mu_);
          if (queue_.empty() && !stopping_) cv_.wait_for(lk, std::chrono::milliseconds(20));
        }
        continue;
      }
      // Open MPI advances a non-blocking collective only inside MPI calls, so while one is in
      // flight every sleep between MPI_Tests stalls its pipeline (a 4 MB allreduce took 7x
      // MPI_Allreduce's time with 16-64 us sleeps). Poll with yields, which hand the core to
      // compute threads that want it; sleep only after long waits (a lagging peer).
      if (++idle_polls < 20000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    std::lock_guard dl(link_->mu);
    link_->step = nullptr;  // Work handles stop driving; what follows is this thread's alone
    bool healthy;
    {
      std::lock_guard lk(mu_);
      healthy = broken_.empty();
    }
    bool freed = false;
    try {
      // close() waits up to the collective timeout for the peers' goodbyes by itself.
      MpiWatchdog::Scope in_mpi(*watchdog_, std::chrono::milliseconds(timeout_ms_->load()));
      bool clean = heartbeat_ok_ &&
                   heartbeat_->close(healthy, std::chrono::milliseconds(timeout_ms_->load()));
      // MPI communicators with unmatched traffic stay allocated so their ids are not reused.
      if (clean && healthy && abandoned_.empty()) {
        MPI_Comm_free(&coll_comm_);
        MPI_Comm_free(&hb_comm_);
        freed = true;
      }
    } catch (const Error&) {
    }
    if (!freed) {
      // Requests are still posted into the heartbeat's and the abandoned collectives' buffers:
      // they outlive this communicator, or a late peer's message lands in freed memory.
      auto left = std::make_shared<Leftovers>();
      left->heartbeat = std::move(heartbeat_);
      left->collectives = std::move(abandoned_);
      left->ring_buffer = ring_buffer_;
      mpi::keep_until_exit(std::move(left));
    }
  }

  void stop() {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
    watchdog_.reset();  // before heartbeat_ (moved to the leftovers or freed) can go
  }

  // One MPI call may run this long before the watchdog ends the process: as long as a peer
  // may be silent (the peers declare this rank dead then anyway), and never under 2 s.
  std::chrono::milliseconds stuck_limit() const {
    return std::max(std::chrono::milliseconds(peer_timeout_ms_.load()),
                    std::chrono::milliseconds(2000));
  }

  // The watchdog's thread: a call into MPI has not returned for stuck_limit(). Reads only
  // atomics and what the watchdog hands it (this rank's thread is inside MPI, holding the rest).
  void stuck(const Heartbeat& heartbeat, double stuck_s, const std::string& context) {
    std::string silent = heartbeat.silent_peers(std::chrono::milliseconds(500));
    MpiWatchdog::end_process(fmt::format(
        "[mpi] rank {}: a call into MPI has not returned for {:.1f} s (working on {}); {}. "
        "Open MPI does not return from such a call after a peer has died, so this process "
        "ends now with exit code 1 rather than hang (the limit is the peer timeout, "
        "ONYX_PEER_TIMEOUT)",
        rank_, stuck_s, context.empty() ? "no collective yet" : context,
        silent.empty() ? "every peer was heard from in the last 0.5 s"
                       : silent + " (dead or hung; no heartbeat arrives while MPI is stuck)"));
  }

  int rank_ = 0, size_ = 1;
  MPI_Comm coll_comm_ = MPI_COMM_NULL, hb_comm_ = MPI_COMM_NULL;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<MpiWatchdog> watchdog_;  // after heartbeat_: it reads the heartbeat
  std::shared_ptr<std::atomic<int64_t>> last_loop_ = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> timeout_ms_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<int64_t> peer_timeout_ms_{0};
  // Progress state, touched only with link_->mu held (step()).
  std::shared_ptr<ProgressLink> link_ = std::make_shared<ProgressLink>();
  std::optional<Collective> active_;
  int64_t started_ = 0;
  bool heartbeat_ok_ = true;
  std::vector<Collective> abandoned_;  // timed out or failed with requests still posted
  bool ring_allreduce_ = true;  // ONYX_MPI_ALLREDUCE
  // The point-to-point allreduces' receive buffer, reused by every allreduce (p2p_allreduce.h).
  std::shared_ptr<std::vector<char>> ring_buffer_ = std::make_shared<std::vector<char>>();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Collective> queue_;
  std::string broken_;
  bool stopping_ = false;
  std::thread thread_;
  int finalize_hook_ = -1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace onyx::dist
