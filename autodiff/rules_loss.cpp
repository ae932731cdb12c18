// Gradient rules: loss ops.
#include "autodiff/gradient_rules.h"

namespace onyx::autodiff {

void add_loss_rules(RuleTable& t) {}

}  // namespace onyx::autodiff
