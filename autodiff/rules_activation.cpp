// Gradient rules: activation ops.
#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

void add_activation_rules(RuleTable& t) {}

}  // namespace onyx::autodiff
