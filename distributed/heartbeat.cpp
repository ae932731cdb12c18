#include "distributed/heartbeat.h"

#include <fmt/format.h>

#include <thread>

#include "distributed/mpi_runtime.h"

namespace onyx::dist {
namespace {
constexpr int kTag = 7001;
constexpr auto kInterval = std::chrono::milliseconds(100);
int64_t ns(Heartbeat::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

Heartbeat::Heartbeat(MPI_Comm comm, int rank, int size)
    : comm_(comm), rank_(rank), size_(size), peers_(size), next_send_(Clock::now()) {
  for (int p = 0; p < size_; ++p) {
    peers_[p].heard_ns.store(ns(Clock::now()), std::memory_order_relaxed);
    if (p != rank_) post_recv(p);
  }
}

void Heartbeat::post_recv(int p) {
  mpi::check(MPI_Irecv(peers_[p].recv_buf, 2, MPI_INT64_T, p, kTag, comm_, &peers_[p].recv),
             "MPI_Irecv (heartbeat)");
}

void Heartbeat::receive() {
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    int done = 1;
    while (peer.recv != MPI_REQUEST_NULL && done) {
      mpi::check(MPI_Test(&peer.recv, &done, MPI_STATUS_IGNORE), "MPI_Test (heartbeat)");
      if (!done) break;
      peer.heard_ns.store(ns(Clock::now()), std::memory_order_relaxed);
      peer.started = std::max(peer.started, peer.recv_buf[0]);
      peer.closed.store(peer.recv_buf[1] != 0, std::memory_order_relaxed);
      if (!peer.closed) post_recv(p);  // no more messages follow a goodbye
    }
  }
}

void Heartbeat::poll(int64_t started) {
  receive();
  auto now = Clock::now();
  if (now < next_send_) return;
  next_send_ = now + kInterval;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[p];
    int done = 1;
    // A peer that does not drain its messages gets no new ones until it does.
    if (peer.send != MPI_REQUEST_NULL) MPI_Test(&peer.send, &done, MPI_STATUS_IGNORE);
    if (!done) continue;
    peer.send_buf[0] = started;
    mpi::check(MPI_Isend(peer.send_buf, 2, MPI_INT64_T, p, kTag, comm_, &peer.send),
               "MPI_Isend (heartbeat)");
  }
}

double Heartbeat::quiet_s(int p, Clock::time_point now) const {
  return static_cast<double>(ns(now) - peers_[p].heard_ns.load(std::memory_order_relaxed)) * 1e-9;
}

bool Heartbeat::any_silent(std::chrono::milliseconds silent) const {
  auto now = Clock::now();
  const double limit = std::chrono::duration<double>(silent).count();
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && !peers_[p].closed && quiet_s(p, now) > limit) return true;
  }
  return false;
}

std::string Heartbeat::silent_peers(std::chrono::milliseconds silent) const {
  auto now = Clock::now();
  const double limit = std::chrono::duration<double>(silent).count();
  std::string out;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[p].closed.load(std::memory_order_relaxed)) continue;
    double quiet = quiet_s(p, now);
    if (quiet <= limit) continue;
    out += fmt::format("{}rank {} not heard from for {:.1f} s", out.empty() ? "" : "; ", p, quiet);
  }
  return out;
}

std::string Heartbeat::diagnose(int64_t seq, std::chrono::milliseconds silent) const {
  auto now = Clock::now();
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    double quiet = quiet_s(p, now);
    if (peers_[p].closed) {
      add(fmt::format("rank {} has destroyed its communicator (after {} collectives)", p,
                      peers_[p].started));
    } else if (quiet > std::chrono::duration<double>(silent).count()) {
      add(fmt::format("rank {} not heard from for {:.1f} s (dead or hung)", p, quiet));
    } else if (peers_[p].started < seq) {
      add(fmt::format("rank {} has not started it (it has started {} collectives)", p,
                      peers_[p].started));
    }
  }
  return out;
}

bool Heartbeat::close(bool wait_for_peers, std::chrono::milliseconds timeout) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    mpi::check(MPI_Isend(peers_[p].bye_buf, 2, MPI_INT64_T, p, kTag, comm_, &peers_[p].bye),
               "MPI_Isend (heartbeat goodbye)");
  }
  auto deadline = Clock::now() + timeout;
  bool clean = false;
  while (wait_for_peers) {
    receive();
    clean = true;
    for (int p = 0; p < size_; ++p) {
      Peer& peer = peers_[p];
      for (MPI_Request* r : {&peer.send, &peer.bye}) {
        int done = 1;
        if (*r != MPI_REQUEST_NULL) MPI_Test(r, &done, MPI_STATUS_IGNORE);
        clean = clean && done;
      }
      clean = clean && peer.recv == MPI_REQUEST_NULL;
    }
    if (clean || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // When not clean, unmatched messages remain. Nothing is cancelled or freed: cancelling a receive races with
  // its matching in Open MPI 4.1 (a segfault inside MPI_Cancel while another communicator's
  // thread progressed MPI, seen in CI), and a freed request may still write into recv_buf.
  // The caller keeps this object, and its communicator, until the process exits.
  return clean;
}

}  // namespace onyx::dist
