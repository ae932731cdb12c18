#include "launcher/train_checkpoints.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "graph/error.h"
#include "training/checkpoint.h"

namespace onyx::cli {

namespace fs = std::filesystem;

namespace {

fs::path layout_file(const fs::path& checkpoint) {
  return fs::path(checkpoint).replace_extension(".json");
}

}  // namespace

std::string save_run_checkpoint(const TrainingSession& session, const std::string& dir,
                                const RunLayout& layout) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  ONYX_CHECK(!ec, "[train] cannot create the checkpoint folder '{}': {}", dir, ec.message());
  fs::path path = fs::path(dir) / fmt::format("step-{:08d}.onyx", session.step());
  // The layout first: a checkpoint never exists without it.
  nlohmann::json j = {{"samples", layout.samples},
                      {"batch", layout.batch},
                      {"accumulate", layout.accumulate},
                      {"shuffle", layout.shuffle}};
  // Data parallel: one writer for the layout (every rank holds the same run), and every rank
  // learns whether it worked, so none waits in the checkpoint's collectives for a failed lead.
  const auto& comm = session.config().communicator;
  const bool lead = !comm || comm->rank() == 0;
  std::string why;
  if (lead) {
    try {
      training::write_file_atomically(layout_file(path).string(), j.dump(2) + "\n");
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (comm) {
    Tensor failed = Tensor::from_vector<int32_t>({1}, {why.empty() ? 0 : 1});
    comm->allreduce(failed, dist::ReduceOp::Max)->wait();
    if (why.empty() && failed.data<int32_t>()[0] != 0)
      why = fmt::format("[checkpoint] rank 0 failed to write '{}'", layout_file(path).string());
  }
  if (!why.empty()) throw Error(why);
  try {
    session.save_checkpoint(path.string());
  } catch (const Error&) {
    // A failed save (disk full) leaves no layout without its checkpoint.
    if (lead) fs::remove(layout_file(path), ec);
    throw;
  }
  return path.string();
}

std::string resolve_checkpoint(const std::string& path) {
  if (!fs::is_directory(path)) return path;
  static const std::regex name(R"(step-(\d+)\.onyx)");
  std::string best;
  int64_t best_step = -1;
  for (const auto& e : fs::directory_iterator(path)) {
    std::smatch m;
    std::string file = e.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    int64_t step = std::stoll(m[1].str());
    if (step > best_step) best_step = step, best = e.path().string();
  }
  ONYX_CHECK(!best.empty(), "[train] --resume '{}' is a folder without step-<N>.onyx checkpoints",
             path);
  return best;
}

int64_t load_run_checkpoint(TrainingSession& session, const std::string& path,
                            const RunLayout& layout) {
  if (fs::exists(layout_file(path))) {
    nlohmann::json j;
    try {
      std::ifstream in(layout_file(path));
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      ONYX_THROW("[train] '{}' is not valid JSON: {}", layout_file(path).string(), e.what());
    }
    auto check = [&](const char* key, const char* option, auto now) {
      ONYX_CHECK(j.contains(key) && j[key] == now,
                 "[train] --resume '{}': the checkpointed run "
                 "had {} {}, this one has {}; resuming would not continue the same run",
                 path, option, j.value(key, nlohmann::json()).dump(), nlohmann::json(now).dump());
    };
    check("samples", "training samples", layout.samples);
    check("batch", "--batch", layout.batch);
    check("accumulate", "--accumulate", layout.accumulate);
    check("shuffle", "--shuffle", layout.shuffle);
  }
  session.load_checkpoint(path);
  // The micro-batch count is in the checkpoint's header; TrainingSession counts optimizer steps.
  training::CheckpointData d = training::read_checkpoint(path);
  return d.meta.at("micro").get<int64_t>();
}

}  // namespace onyx::cli
