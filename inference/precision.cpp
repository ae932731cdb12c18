#include "inference/precision.h"

#include "graph/shape_inference.h"
#include "kernels/provider.h"

namespace onyx {

AutocastOptions provider_autocast_options(const Model& model) {
  AutocastOptions o;
  // The CPU registry decides: CPU is every session's fallback, so a node autocast here has a
  // kernel wherever placement sends it (a device provider without the low-precision kernel
  // leaves the node to the CPU).
  o.supports = [&model](const Node& n, DataType dt) {
    return cpu_kernel_registry().find(n.op_type, n.domain, model.opset(n.domain), "cpu", dt) != nullptr;
  };
  return o;
}

AutocastReport autocast_for_providers(Model& model, Precision p) {
  if (p == Precision::Float32) return {};
  infer_types_and_shapes(model);
  return autocast(model, p, provider_autocast_options(model));
}

}  // namespace onyx
