#include "launcher/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace onyx::cli {

ProgressBar::ProgressBar(bool enabled, std::FILE* out) : enabled_(enabled), out_(out) {}

bool ProgressBar::is_terminal(std::FILE* out) { return isatty(fileno(out)) != 0; }

void ProgressBar::update(const std::string& label, int64_t done, int64_t total,
                         const std::string& info, bool force) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int64_t kWidth = 20;
  int64_t filled = total > 0 ? std::clamp<int64_t>(done * kWidth / total, 0, kWidth) : 0;
  std::string line = fmt::format("{} [{}{}] {}/{}  {}", label, std::string(filled, '#'),
                                 std::string(kWidth - filled, '.'), done, total, info);
  // Pad with spaces to wipe what a longer previous line left behind.
  size_t shown = line.size();
  if (line.size() < drawn_) line.append(drawn_ - line.size(), ' ');
  fmt::print(out_, "\r{}", line);
  std::fflush(out_);
  drawn_ = shown;
}

void ProgressBar::clear() {
  if (!enabled_ || drawn_ == 0) return;
  fmt::print(out_, "\r{}\r", std::string(drawn_, ' '));
  std::fflush(out_);
  drawn_ = 0;
}

}  // namespace onyx::cli
