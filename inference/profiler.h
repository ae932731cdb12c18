// Collects per-node timing events from runs and writes them as Chrome-trace JSON
// (open in chrome://tracing or Perfetto).
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "inference/executor.h"

namespace onyx {

class Profiler {
 public:
  /// Adds one run's events and its summary (peak bytes, wall time).
  void add_run(std::vector<ProfileEvent> events, size_t peak_bytes, double wall_ms, int64_t start_us);
  /// Writes everything collected so far to `path`.
  void write(const std::string& path) const;

 private:
  mutable std::mutex mu_;
  std::vector<ProfileEvent> events_;
  struct RunSummary {
    int64_t start_us;
    double wall_ms;
    size_t peak_bytes;
  };
  std::vector<RunSummary> runs_;
};

}  // namespace onyx
