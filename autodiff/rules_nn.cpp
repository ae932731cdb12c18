// Gradient rules: nn ops.
#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

void add_nn_rules(RuleTable& t) {}

}  // namespace onyx::autodiff
