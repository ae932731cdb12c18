// A one-line terminal progress bar for `onyx train`, redrawn in place with '\r':
//
//   epoch 3/20 [##########..........] 23/45  loss 0.2345  lr 1.00e-03  12345 samples/s
//
// Hand-written (a few lines): Debian packages no C++ progress-bar library. Draws only when
// enabled (by default when the stream is a terminal) and at most ten times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace onyx::cli {

class ProgressBar {
 public:
  /// `out` is usually stderr; nothing is drawn when `enabled` is false.
  ProgressBar(bool enabled, std::FILE* out);
  /// True when `out` is an interactive terminal.
  static bool is_terminal(std::FILE* out);

  /// Redraws "<label> [bar] done/total  <info>" unless the last draw is under 100 ms old
  /// (`force` draws anyway, e.g. for the last batch).
  void update(const std::string& label, int64_t done, int64_t total, const std::string& info,
              bool force = false);
  /// Erases the bar, so that the next printed line starts at column 0.
  void clear();

 private:
  bool enabled_;
  std::FILE* out_;
  size_t drawn_ = 0;  // characters on the line now
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace onyx::cli
