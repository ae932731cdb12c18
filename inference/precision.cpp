#include "inference/precision.h"

#include "graph/shape_inference.h"
#include "inference/provider.h"

namespace onyx {

AutocastOptions provider_autocast_options(const Model& model) {
  AutocastOptions o;
  o.supports = [&model, providers = available_providers()](const Node& n, DataType dt) {
    for (const auto& p : providers)
      if (p->registry().find(n.op_type, n.domain, model.opset(n.domain), p->name(), dt)) return true;
    return false;
  };
  return o;
}

AutocastReport autocast_for_providers(Model& model, Precision p) {
  if (p == Precision::Float32) return {};
  infer_types_and_shapes(model);
  return autocast(model, p, provider_autocast_options(model));
}

}  // namespace onyx
