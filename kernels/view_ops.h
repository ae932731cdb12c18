// The view ops every provider shares (kernels/view_ops.cpp).
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace onyx {

/// Registers Reshape, Flatten, Squeeze, Unsqueeze and Identity (opset 1+) for `provider` over
/// `types`; Reshape's shape and Squeeze/Unsqueeze's axes are host inputs.
void register_view_kernels(KernelRegistry& r, const std::string& provider, const std::vector<DataType>& types);

}  // namespace onyx
