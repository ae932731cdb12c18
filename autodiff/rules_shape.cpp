// Gradient rules: shape ops.
#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

void add_shape_rules(RuleTable& t) {}

}  // namespace onyx::autodiff
