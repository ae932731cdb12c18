// onyx._onyx: the compiled half of the `onyx` Python package (python/onyx/ is the other).
#include "bindings.h"

namespace onyx::py {

void bind_errors(nb::module_& m) {
  // Every onyx::Error (NotImplemented included) a binding lets through becomes onyx.Error,
  // with the C++ message; a RuntimeError, as ONNX Runtime's errors are.
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
}

}  // namespace onyx::py

NB_MODULE(_onyx, m) {
  m.doc() = "onyx runtime bindings; import the `onyx` package instead.";
  onyx::py::bind_errors(m);
  onyx::py::bind_tensor(m);
  onyx::py::bind_inference(m);
  onyx::py::bind_training(m);
  onyx::py::bind_autograd(m);
}
