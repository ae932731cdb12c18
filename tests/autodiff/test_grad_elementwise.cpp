// Finite-difference checks of the elementwise gradient rules (float64).
#include "grad_check.h"

namespace onyx::test {

TEST(GradElementwise, AddSubMulDivWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {2, 3}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {2, 3}), P("b", {3}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {2, 1, 4}), P("b", {3, 1}, 0.5, 2)}});
    check_gradient({.op = op, .inputs = {P("a", {}), P("b", {2, 2}, 0.5, 2)}});
  }
}

TEST(GradElementwise, NegIdentity) {
  check_gradient({.op = "Neg", .inputs = {P("x", {2, 3})}});
  check_gradient({.op = "Identity", .inputs = {P("x", {4})}});
}

}  // namespace onyx::test
