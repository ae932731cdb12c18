#include "graph/float8.h"

#include "graph/error.h"

namespace onyx {

float float8_to_float(uint8_t bits, DataType t) {
  ONYX_THROW("[float8] conversion from {} not implemented yet", dtype_name(t));
}
uint8_t float_to_float8(float v, DataType t, bool saturate) {
  ONYX_THROW("[float8] conversion to {} not implemented yet", dtype_name(t));
}

}  // namespace onyx
