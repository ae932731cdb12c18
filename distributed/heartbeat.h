// Liveness of a communicator's peers. Run by the communicator's thread only (but
// silent_peers(), which the MPI watchdog reads from its own thread): every 100 ms
// it sends each peer how many collectives this rank has started, and records when it last
// heard from each peer and how far that peer has got, so a timed-out collective can name
// the ranks that are dead, hung, or have not issued it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace onyx::dist {

class Heartbeat {
 public:
  using Clock = std::chrono::steady_clock;
  /// `comm` is a communicator of its own (heartbeats use one tag on it).
  Heartbeat(MPI_Comm comm, int rank, int size);

  /// Sends when due and takes in what arrived; cheap otherwise.
  void poll(int64_t started);
  /// Why collective number `seq` (1-based) is not done: ranks not heard from for longer than
  /// `silent`, then ranks that have not started it. Empty when every peer looks fine.
  std::string diagnose(int64_t seq, std::chrono::milliseconds silent) const;
  /// True when some peer has not been heard from for longer than `silent`.
  bool any_silent(std::chrono::milliseconds silent) const;
  /// "rank P not heard from for S s" for each such peer, "; "-joined; empty when none.
  /// Safe from any thread (it reads only atomics), also while another is inside MPI.
  std::string silent_peers(std::chrono::milliseconds silent) const;
  /// Says goodbye to every peer; when `wait_for_peers`, waits up to `timeout` for theirs.
  /// True when every message was matched, so the MPI communicator can be freed. Otherwise
  /// receives are still posted into this object: keep it alive (mpi::keep_until_exit).
  bool close(bool wait_for_peers, std::chrono::milliseconds timeout);

 private:
  struct Peer {
    int64_t recv_buf[2] = {0, 0};  // started count, goodbye flag
    int64_t send_buf[2] = {0, 0};
    int64_t bye_buf[2] = {0, 1};
    MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL, bye = MPI_REQUEST_NULL;
    std::atomic<int64_t> heard_ns{0};  // when last heard from: Clock's ns since its epoch
    int64_t started = 0;
    std::atomic<bool> closed{false};  // said goodbye: destroyed its communicator
  };
  /// Seconds since peer `p` was last heard from.
  double quiet_s(int p, Clock::time_point now) const;
  void receive();
  void post_recv(int p);

  MPI_Comm comm_;
  int rank_, size_;
  std::vector<Peer> peers_;
  Clock::time_point next_send_;
};

}  // namespace onyx::dist
