// Turning initializers a caller always feeds into plain graph inputs.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "graph/ir.h"

namespace onyx {

/// A copy of `m` in which every initializer named in `fed` is a graph input without a default
/// (typed by the initializer's dtype and shape): a session over it takes the caller's tensor
/// (a zero-copy view of its parameters) and keeps no copy of the weights.
/// onyx::Error when a name is not an initializer.
std::unique_ptr<Model> without_defaults(const Model& m, const std::set<std::string>& fed);

}  // namespace onyx
