#include "kernels/prepare_context.h"

namespace onyx {

Tensor& PrepareContext::allocate_output(int i, DataType, const Shape&) {
  ONYX_THROW("[{}] internal error: prepare() asked for output {}; outputs exist only in runs",
             label(), i);
}

void PrepareContext::set_output(int i, Datum) {
  ONYX_THROW("[{}] internal error: prepare() set output {}; outputs exist only in runs", label(),
             i);
}

std::vector<Datum> PrepareContext::run_subgraph(const Graph& g, const std::vector<Datum>&) {
  ONYX_THROW("[{}] internal error: prepare() ran subgraph '{}'; subgraphs run only in runs",
             label(), g.name);
}

}  // namespace onyx
