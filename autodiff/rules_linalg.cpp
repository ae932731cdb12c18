// Gradient rules: linalg ops.
#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

void add_linalg_rules(RuleTable& t) {}

}  // namespace onyx::autodiff
