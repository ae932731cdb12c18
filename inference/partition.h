// Partitioning: each node of the main graph goes to the first provider (in the session's
// priority order) with a kernel for its op, opset and dtype; the rest fall back to the CPU.
// Copies are explicit ai.onyx MemcpyFromHost / MemcpyToHost nodes wherever a value crosses
// between host and device memory, one per value and direction, so the profile and `onyx
// inspect --plan` show every transfer. Small integer shape computations (Shape -> Gather ->
// Concat -> Reshape's shape) stay on the CPU, and Shape/Size never force a copy.
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/ir.h"
#include "kernels/provider.h"

namespace onyx {

struct Placement {
  /// Priority order; the CPU provider is last (the fallback).
  std::vector<std::shared_ptr<ExecutionProvider>> providers;
  /// Main-graph node -> index into providers. Nodes not listed (subgraph bodies) run on CPU.
  std::unordered_map<const Node*, int> provider_of;
  /// CPU nodes that a device provider in the list has no kernel for.
  std::unordered_set<const Node*> fallback;

  int cpu_index() const { return static_cast<int>(providers.size()) - 1; }
  int index_of(const Node* n) const {
    auto it = provider_of.find(n);
    return it == provider_of.end() ? cpu_index() : it->second;
  }
  const ExecutionProvider& provider(const Node* n) const { return *providers[index_of(n)]; }
};

/// A placement with only the CPU provider: everything runs on the host, nothing is copied.
Placement cpu_placement(std::shared_ptr<ExecutionProvider> cpu);

/// Places every node of `model`'s main graph over `providers` (CPU last) and inserts the copy
/// nodes. With the CPU alone this places everything on it and changes nothing.
Placement partition_graph(Model& model, std::vector<std::shared_ptr<ExecutionProvider>> providers);

}  // namespace onyx
