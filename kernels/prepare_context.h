// The KernelContext a kernel's prepare() (kernels/kernel.h) can hand to code written for runs,
// such as the geometry checks and weight packing a first run does: it names the node, lends
// `threads` and heap scratch, and has no inputs, outputs or subgraphs.
#pragma once

#include "kernels/kernel.h"

namespace onyx {

class PrepareContext final : public KernelContext {
 public:
  PrepareContext(const Node& node, int threads) : node_(node), threads_(threads) {}
  const Node& node() const override { return node_; }
  int num_inputs() const override { return 0; }
  const Datum* input_datum(int) const override { return nullptr; }
  int num_outputs() const override { return 0; }
  bool output_wanted(int) const override { return false; }
  Tensor& allocate_output(int i, DataType, const Shape&) override;
  void set_output(int i, Datum) override;
  Tensor scratch(DataType dtype, const Shape& shape) override { return Tensor::empty(dtype, shape); }
  int threads() const override { return threads_; }
  std::vector<Datum> run_subgraph(const Graph&, const std::vector<Datum>&) override;

 private:
  const Node& node_;
  int threads_;
};

}  // namespace onyx
