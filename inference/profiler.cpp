#include "inference/profiler.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace onyx {

void Profiler::add_run(std::vector<ProfileEvent> events, size_t peak_bytes, double wall_ms,
                       int64_t start_us) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : events) events_.push_back(std::move(e));
  runs_.push_back({start_us, wall_ms, peak_bytes});
}

void Profiler::write(const std::string& path) const {
  using nlohmann::json;
  json trace = json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : events_) {
    json shapes = json::array();
    for (const auto& s : e.input_shapes) shapes.push_back(s);
    trace.push_back({{"name", e.name},
                     {"cat", "node"},
                     {"ph", "X"},
                     {"ts", e.start_us},
                     {"dur", e.dur_us},
                     {"pid", 0},
                     {"tid", e.tid},
                     {"args", {{"op", e.op}, {"input_shapes", shapes}}}});
  }
  for (size_t i = 0; i < runs_.size(); ++i) {
    const auto& r = runs_[i];
    trace.push_back({{"name", "run"},
                     {"cat", "session"},
                     {"ph", "X"},
                     {"ts", r.start_us},
                     {"dur", static_cast<int64_t>(r.wall_ms * 1000)},
                     {"pid", 0},
                     {"tid", 0},
                     {"args", {{"run", i}, {"peak_bytes", r.peak_bytes}}}});
  }
  std::ofstream f(path);
  ONYX_CHECK(f.good(), "[profiler] cannot write '{}'", path);
  f << json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump(1);
}

}  // namespace onyx
