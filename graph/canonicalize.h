// Opset canonicalization: rewrites old-opset attribute forms of ai.onnx ops into the
// input forms of their newest versions, so kernels see one layout per op.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// For the main graph and every subgraph, moves attributes that later opsets turned into
/// inputs (Squeeze/Unsqueeze/Reduce* axes, Split split, Slice-1 starts/ends/axes, Pad-2
/// pads/value, Clip-6 min/max, TopK-1 k, Dropout ratio) into new initializer inputs and
/// drops the attributes. The node's op_type is kept. Runs after validation.
void canonicalize_opsets(Model& model);

}  // namespace onyx
