// Cast's attributes, parsed alike by every provider.
#pragma once

#include "graph/float8.h"
#include "kernels/kernel.h"

namespace onyx {

/// The target type: `to` as a data type number, or (Cast-1) its name ("FLOAT", "INT64").
DataType parse_cast_to(const KernelInfo& info);

/// round_mode of a cast to float8e8m0: up (the default), down or nearest.
E8M0Round parse_e8m0_round(const KernelInfo& info);

}  // namespace onyx
