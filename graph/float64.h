// A model recomputed in float64, for finite-difference gradient checks (`onyx gradcheck`):
// in float32 a central difference loses about half of its digits, in float64 it checks a
// gradient to ~1e-8.
#pragma once

#include "graph/ir.h"

namespace onyx {

/// Rewrites `model` and its subgraphs to compute in double: float32/float16/bfloat16
/// initializers, value types, graph inputs and outputs, Cast/EyeLike/Random* target dtypes
/// and the values of Constant/ConstantOfShape become double. Integer and bool parts stay.
void convert_to_float64(Model& model);

}  // namespace onyx
