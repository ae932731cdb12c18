// onyx.AutogradSession: an ONNX model as a differentiable function (onyx::AutogradSession) for
// Python autograd engines; python/onyx/torch.py builds torch.autograd.Function on it. Every
// tensor argument is any DLPack producer (torch tensor, numpy array, onyx.Tensor), viewed
// without a copy; results are onyx.Tensors, which torch.from_dlpack views in turn.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "training/autograd_session.h"

namespace onyx::py {

using namespace nb::literals;

namespace {

/// What one forward kept for its backward. The views of the caller's tensors it holds keep
/// their producers' memory alive (DLPack deleters run when the last view dies).
struct PySaved {
  std::shared_ptr<const AutogradSession::Saved> saved;
};

std::vector<Tensor> tensors_from(const nb::handle& seq, const char* what) {
  std::vector<Tensor> out;
  size_t i = 0;
  for (nb::handle item : seq) {
    out.push_back(to_tensor(item, fmt::format("{}[{}]", what, i), Convert::CopyStrided));
    ++i;
  }
  return out;
}

nb::list tensors_or_none(const std::vector<Tensor>& tensors) {
  nb::list out;
  for (const Tensor& t : tensors) out.append(t.storage() ? nb::cast(t) : nb::none());
  return out;
}

nb::tuple forward(const AutogradSession& s, const nb::handle& inputs, const nb::handle& params,
                  const nb::handle& buffers, bool training, bool need_grad,
                  std::optional<uint64_t> seed) {
  std::vector<Tensor> in = tensors_from(inputs, "inputs");
  std::vector<Tensor> ps = tensors_from(params, "params");
  std::vector<Tensor> bs = tensors_from(buffers, "buffers");
  AutogradSession::ForwardResult r;
  {
    nb::gil_scoped_release unlocked;
    r = s.forward(in, ps, bs, {.training = training, .need_grad = need_grad, .seed = seed});
  }
  nb::list outputs;
  for (const Tensor& t : r.outputs) outputs.append(nb::cast(t));
  nb::object saved = r.saved ? nb::cast(PySaved{r.saved}) : nb::none();
  nb::list updates;
  for (auto& [name, t] : r.state_updates) updates.append(nb::make_tuple(name, t));
  return nb::make_tuple(outputs, saved, updates);
}

nb::tuple backward(const AutogradSession& s, const PySaved& saved, const nb::handle& grad_outputs) {
  ONYX_CHECK(saved.saved != nullptr, "[python] AutogradSession.backward: empty Saved");
  std::vector<Tensor> grads;
  size_t i = 0;
  for (nb::handle g : grad_outputs) {
    // None: the loss does not use this output; the C++ side reads an empty Tensor as zeros.
    grads.push_back(g.is_none() ? Tensor()
                                : to_tensor(g, fmt::format("grad_outputs[{}]", i), Convert::CopyStrided));
    ++i;
  }
  AutogradSession::Gradients r;
  {
    nb::gil_scoped_release unlocked;
    r = s.backward(*saved.saved, grads);
  }
  return nb::make_tuple(tensors_or_none(r.inputs), tensors_or_none(r.params));
}

std::vector<std::string> io_names(const std::vector<IoInfo>& infos) {
  std::vector<std::string> names;
  for (const IoInfo& io : infos) names.push_back(io.name);
  return names;
}

}  // namespace

void bind_autograd(nb::module_& m) {
  nb::class_<PySaved>(m, "AutogradSaved",
                      "What an AutogradSession.forward kept for its backward (opaque).");

  nb::class_<AutogradSession>(
      m, "AutogradSession",
      "An ONNX model as a differentiable function: forward() on the caller's inputs, "
      "parameters and buffers, backward() from the outputs' gradients to the inputs' and "
      "parameters' (onyx::AutogradSession). The caller owns loss, optimizer and memory.")
      .def(
          "__init__",
          [](AutogradSession* self, nb::handle model, std::vector<std::string> parameters,
             std::vector<std::string> buffers, int threads, bool unbiased_running_var,
             const std::string& precision) {
            std::unique_ptr<Model> forward = load_model_arg(model);
            AutogradOptions options;
            options.parameters = std::move(parameters);
            options.buffers = std::move(buffers);
            options.threads = threads;
            options.unbiased_running_var = unbiased_running_var;
            options.precision = parse_precision(precision);
            nb::gil_scoped_release unlocked;
            new (self) AutogradSession(std::move(forward), options);
          },
          "model"_a, "parameters"_a, "buffers"_a, "threads"_a = 0,
          "unbiased_running_var"_a = false, "precision"_a = "fp32")
      .def_prop_ro("input_names", [](const AutogradSession& s) { return io_names(s.inputs()); })
      .def_prop_ro("output_names", [](const AutogradSession& s) { return io_names(s.outputs()); })
      .def_prop_ro("parameter_names", &AutogradSession::parameter_names)
      .def_prop_ro("buffer_names", &AutogradSession::buffer_names)
      .def("initializer", &AutogradSession::initializer, "name"_a,
           "The model's own value of an initializer (parameter or buffer).")
      .def(
          "missing_gradients",
          [](const AutogradSession& s) {
            std::vector<std::tuple<std::string, std::string, std::string>> out;
            for (const auto& mg : s.missing_gradients()) out.emplace_back(mg.node, mg.op_type, mg.why);
            return out;
          },
          "[(node, op_type, why)] for nodes on a differentiable path without a gradient rule.")
      .def("forward", &forward, "inputs"_a, "params"_a, "buffers"_a, "training"_a,
           "need_grad"_a, "seed"_a = nb::none(),
           "-> (outputs: list[onyx.Tensor], saved: AutogradSaved | None, state_updates: "
           "list[(buffer name, onyx.Tensor)]). saved is None unless need_grad.")
      .def("backward", &backward, "saved"_a, "grad_outputs"_a,
           "-> (input grads, param grads): lists of onyx.Tensor, None where there is no "
           "gradient. None in grad_outputs means zeros.");
}

}  // namespace onyx::py
