// Checkpoint files of `onyx train`: DIR/step-<N>.onyx (TrainingSession::save_checkpoint) and a
// small DIR/step-<N>.json beside it recording where in the data the run stood, so --resume can
// refuse a run that would not continue the same way (another batch size, data set or order).
#pragma once

#include <cstdint>
#include <string>

#include "training/training_session.h"

namespace onyx::cli {

/// How the run walks the data; a resumed run must match.
struct RunLayout {
  int64_t samples = 0, batch = 0, accumulate = 1;
  bool shuffle = true;
};

/// Saves the session to DIR/step-<step>.onyx (zero-padded) plus its .json; returns the path.
std::string save_run_checkpoint(const TrainingSession& session, const std::string& dir,
                                const RunLayout& layout);

/// PATH itself, or for a folder the step-<N>.onyx with the largest N; onyx::Error when the
/// folder holds none.
std::string resolve_checkpoint(const std::string& path);

/// Loads `path` into `session` after checking its .json (when present) against `layout`;
/// returns the micro-batches the checkpointed run had completed. onyx::Error naming the
/// differing setting, or the session's own error for another model or optimizer.
int64_t load_run_checkpoint(TrainingSession& session, const std::string& path,
                            const RunLayout& layout);

}  // namespace onyx::cli
