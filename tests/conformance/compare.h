// Output comparison as the ONNX backend runner does it: |a-b| <= atol + rtol*|b| for
// floats (NaN equals NaN), exact for integers, bools and strings; dtypes and shapes equal.
#pragma once

#include <string>

#include "graph/tensor.h"

namespace onyx::conformance {

/// "" when `got` matches `want`, else a one-line reason.
std::string compare_tensors(const Tensor& got, const Tensor& want, double rtol, double atol);
std::string compare_values(const Datum& got, const Datum& want, double rtol, double atol);

}  // namespace onyx::conformance
