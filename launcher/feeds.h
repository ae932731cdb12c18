// Model inputs for the command line: read from .npy files or made up from declared shapes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "inference/session.h"

namespace onyx::cli {

/// Splits "NAME=VALUE"; onyx::Error naming `what` (e.g. "--input") when there is no '='.
std::pair<std::string, std::string> split_assignment(const std::string& spec,
                                                     const std::string& what);
/// Parses "--dim NAME=VALUE" specs into symbol sizes.
std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& specs);

/// Concrete shape for a declared input: fixed dims kept, symbolic dims from `dims`, else the
/// first non-fixed dim becomes `batch` (when > 0) and the others 1.
Shape concrete_shape(const IoInfo& input, const std::map<std::string, int64_t>& dims,
                     int64_t batch = 0);
/// Random values of `dtype`: floats in [-1, 1), integers in [0, 4), random bools and letters.
Tensor random_tensor(DataType dtype, const Shape& shape, uint64_t seed);

/// Feeds for `session`: each "NAME=PATH" (or a bare PATH for a one-input model) from `files`,
/// where PATH is a .npy file for a tensor input, or a folder of 0.npy, 1.npy, ... for a sequence
/// input (an empty folder: an empty sequence). Optional inputs not given are left absent (empty
/// optionals). The rest are random when `random`, else an onyx::Error naming what is missing.
NamedValues make_feeds(const Session& session, const std::vector<std::string>& files, bool random,
                       const std::map<std::string, int64_t>& dims, int64_t batch, uint64_t seed);

}  // namespace onyx::cli
