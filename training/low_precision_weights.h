// Mixed precision's 16-bit weights, kept by the optimizer instead of cast by the graph.
//
// Autocast casts each float32 weight to bf16/fp16 once per step, a Cast node that reads the whole
// weight from memory the optimizer wrote long before (BERT-small in bf16: ~6 ms of a 250 ms step;
// a 512x512x3x3 convolution weight 1.25 ms). The training session instead keeps a 16-bit copy of
// the flat parameter buffer that the optimizer's update writes piece by piece while each piece is
// in cache (optim::Optimizer::set_low_precision_copy), and feeds its views where the graph read
// the Casts' outputs. The rounding is the Cast kernel's, so the step computes the same bits.
#pragma once

#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/ir.h"

namespace onyx::training {

/// Rewrites the training graph `m`, whose parameters `params` are graph inputs or initializers:
/// each parameter's Cast(to = `dt`) nodes (one, or more where recomputation copied it) are
/// removed and their output becomes a graph input fed at every run. Returns per parameter the
/// name of that input, "" where the parameter has no such Cast (or its cast value is a graph
/// output, or is read inside a subgraph: those stay as they are).
std::vector<std::string> cast_weights_to_inputs(Model& m, const std::vector<std::string>& params,
                                                DataType dt);

}  // namespace onyx::training
