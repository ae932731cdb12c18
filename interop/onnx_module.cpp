#include "interop/onnx_module.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <set>
#include <utility>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "interop/module_state.h"
#include "interop/torch_tensor.h"
#include "training/autograd_session.h"

namespace onyx::torch {

struct OnnxModule::State {
  std::shared_ptr<AutogradSession> session;
  std::string source;  // the file, or "<bytes>", for messages
  std::vector<std::string> input_names, output_names, param_names, buffer_names;
  /// Handles of the registered tensors (the same TensorImpls named_parameters() returns), so
  /// optimizer steps, copy_() and torch::load reach onyx's next call.
  std::vector<at::Tensor> params, buffers;
};

namespace {

using State = OnnxModule::State;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

/// Zero-copy onyx views of torch tensors. Inputs and incoming gradients may be strided (a
/// transposed batch, the expanded ones of sum().backward()): those are copied.
std::vector<Tensor> views(at::TensorList ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(from_torch(t, /*allow_copy=*/true));
  return out;
}

std::vector<at::Tensor> to_torch_all(const std::vector<Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(to_torch(t));
  return out;
}

/// Training-mode forwards return the new running statistics; torch keeps them in the buffers.
void update_buffers(const State& s, const std::vector<std::pair<std::string, Tensor>>& updates) {
  c10::NoGradGuard no_grad;
  for (const auto& [name, value] : updates) {
    auto it = std::find(s.buffer_names.begin(), s.buffer_names.end(), name);
    ONYX_CHECK(it != s.buffer_names.end(), "[onyx::torch] {}: onyx updated '{}', which is not a "
               "buffer of the module", s.source, name);
    s.buffers[it - s.buffer_names.begin()].copy_(to_torch(value));
  }
}

AutogradSession::ForwardResult run_forward(const State& s, at::TensorList inputs, bool training,
                                           bool need_grad) {
  ForwardOptions opts;
  opts.training = training;
  opts.need_grad = need_grad;
  auto r = s.session->forward(views(inputs), views(s.params), views(s.buffers), opts);
  if (training) update_buffers(s, r.state_updates);
  return r;
}

/// What backward needs from its forward: the session (which may outlive the module) and the
/// activations onyx saved. Held in the autograd context as an IValue capsule.
struct SavedCall : ::torch::CustomClassHolder {
  std::shared_ptr<AutogradSession> session;
  std::shared_ptr<const AutogradSession::Saved> saved;
};

/// One recorded call of the model: inputs and parameters are the autograd inputs (flattened
/// from the two lists), onyx's forward and backward graphs compute values and gradients.
struct OnnxFunction : ::torch::autograd::Function<OnnxFunction> {
  static variable_list forward(AutogradContext* ctx, const std::shared_ptr<State>& state,
                               bool training, at::TensorList inputs, at::TensorList params) {
    (void)params;  // the same tensors as state->params; listed so autograd tracks them
    auto r = run_forward(*state, inputs, training, /*need_grad=*/true);
    ONYX_CHECK(r.saved, "[onyx::torch] {}: onyx kept nothing for the backward", state->source);
    auto call = c10::make_intrusive<SavedCall>();
    call->session = state->session;
    call->saved = std::move(r.saved);
    ctx->saved_data["onyx"] = c10::IValue::make_capsule(std::move(call));
    // Gradients of unused outputs stay undefined (onyx seeds zeros itself).
    ctx->set_materialize_grads(false);
    variable_list outputs = to_torch_all(r.outputs);
    variable_list constant;  // integer and bool outputs: torch refuses gradients for them
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!is_float(r.outputs[i].dtype())) constant.push_back(outputs[i]);
    if (!constant.empty()) ctx->mark_non_differentiable(constant);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto capsule = ctx->saved_data.at("onyx").toCapsule();
    const auto& call = static_cast<const SavedCall&>(*capsule);
    std::vector<Tensor> seeds;
    seeds.reserve(grad_outputs.size());
    for (const at::Tensor& g : grad_outputs) seeds.push_back(g.defined() ? from_torch(g, true) : Tensor());
    auto g = call.session->backward(*call.saved, seeds);
    // One entry per apply() argument, lists flattened: state, training, inputs..., params...
    variable_list out = {at::Tensor(), at::Tensor()};
    for (const Tensor& t : g.inputs) out.push_back(t.storage() ? to_torch(t) : at::Tensor());
    for (const Tensor& t : g.params) out.push_back(to_torch(t));
    return out;
  }
};

bool any_requires_grad(at::TensorList ts) {
  return std::any_of(ts.begin(), ts.end(), [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

/// The submodule of `root` that holds `name`'s leaf, created on first use.
::torch::nn::Module& owner_of(::torch::nn::Module& root, const TorchName& name) {
  ::torch::nn::Module* m = &root;
  for (const auto& part : name.modules) {
    auto children = m->named_children();
    if (auto* child = children.find(part))
      m = child->get();
    else
      m = m->register_module(part, std::make_shared<::torch::nn::Module>(part)).get();
  }
  return *m;
}

/// torch can hold "a.b" and "a.c" but not "a" next to "a.b" (a tensor and a submodule "a").
void check_nesting(const std::vector<std::string>& names) {
  std::set<std::string> all(names.begin(), names.end());
  for (const auto& n : names)
    for (size_t dot = n.find('.'); dot != std::string::npos; dot = n.find('.', dot + 1))
      ONYX_CHECK(!all.count(n.substr(0, dot)), "[onyx::torch] initializers '{}' and '{}' cannot both "
                 "be torch tensors: torch would need '{}' as a tensor and as a submodule",
                 n.substr(0, dot), n, n.substr(0, dot));
}

}  // namespace

OnnxModule::OnnxModule(const std::string& path, const OnnxModuleOptions& options)
    : ::torch::nn::Module("onyx::torch::OnnxModule") {
  init(load_model(path), options, path);
}

OnnxModule::OnnxModule(const void* data, size_t size, const OnnxModuleOptions& options)
    : ::torch::nn::Module("onyx::torch::OnnxModule") {
  init(load_model_from_bytes(data, size), options, "<bytes>");
}

OnnxModule::~OnnxModule() = default;

void OnnxModule::init(std::unique_ptr<Model> model, const OnnxModuleOptions& options, std::string source) {
  ONYX_CHECK(options.threads >= 0, "[onyx::torch] OnnxModuleOptions::threads must be >= 0 (0: one per "
             "core), got {}", options.threads);
  const ModuleState ms = choose_module_state(*model, options.trainable);
  auto s = std::make_shared<State>();
  // Running variances move as torch.nn.BatchNorm moves them (unbiased batch variance), not as
  // ONNX says (biased): the module stands in for the torch module the model came from.
  s->session = std::make_shared<AutogradSession>(
      std::move(model), AutogradOptions{.parameters = ms.parameters,
                                        .buffers = ms.buffers,
                                        .unbiased_running_var = true,
                                        .threads = options.threads});
  s->source = std::move(source);
  for (const auto& io : s->session->inputs()) s->input_names.push_back(io.name);
  for (const auto& io : s->session->outputs()) s->output_names.push_back(io.name);
  // The session's lists, not ours: they are what forward() checks the fed tensors against.
  // (They differ only when no initializer reaches an output: an empty list asks AutogradSession
  // for its default set, every float initializer of rank >= 1 but the buffers.)
  s->param_names = s->session->parameter_names();
  s->buffer_names = s->session->buffer_names();
  std::vector<std::string> all = s->param_names;
  all.insert(all.end(), s->buffer_names.begin(), s->buffer_names.end());
  check_nesting(all);
  // Copies of the model's values: torch owns its parameters (the optimizer updates them in
  // place); onyx is fed them on every call.
  for (const auto& name : s->param_names) {
    TorchName tn = split_torch_name(name);
    at::Tensor value = to_torch(s->session->initializer(name)).clone();
    s->params.push_back(owner_of(*this, tn).register_parameter(tn.leaf, value, /*requires_grad=*/true));
  }
  for (const auto& name : s->buffer_names) {
    TorchName tn = split_torch_name(name);
    at::Tensor value = to_torch(s->session->initializer(name)).clone();
    s->buffers.push_back(owner_of(*this, tn).register_buffer(tn.leaf, value));
  }
  state_ = std::move(s);
}

std::vector<at::Tensor> OnnxModule::forward(const std::vector<at::Tensor>& inputs) {
  const State& s = *state_;
  ONYX_CHECK(inputs.size() == s.input_names.size(), "[onyx::torch] {}: expected {} input(s) ({}) but got {}",
             s.source, s.input_names.size(), join(s.input_names), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    ONYX_CHECK(inputs[i].defined(), "[onyx::torch] {}: input {} ('{}') is an undefined tensor", s.source,
               i, s.input_names[i]);
  const bool training = is_training();
  // Inside torch::NoGradGuard, or with nothing to differentiate, onyx runs the plain forward
  // graph and keeps no activations.
  if (!c10::GradMode::is_enabled() || !(any_requires_grad(inputs) || any_requires_grad(s.params)))
    return to_torch_all(run_forward(s, inputs, training, /*need_grad=*/false).outputs);
  return OnnxFunction::apply(state_, training, at::TensorList(inputs), at::TensorList(s.params));
}

const std::vector<std::string>& OnnxModule::input_names() const { return state_->input_names; }
const std::vector<std::string>& OnnxModule::output_names() const { return state_->output_names; }
const std::vector<std::string>& OnnxModule::parameter_names() const { return state_->param_names; }
const std::vector<std::string>& OnnxModule::buffer_names() const { return state_->buffer_names; }
const std::shared_ptr<AutogradSession>& OnnxModule::session() const { return state_->session; }

void OnnxModule::pretty_print(std::ostream& stream) const {
  stream << "onyx::torch::OnnxModule(" << state_->source << ": inputs [" << join(state_->input_names)
         << "], outputs [" << join(state_->output_names) << "], " << state_->params.size() << " parameters, "
         << state_->buffers.size() << " buffers)";
}

}  // namespace onyx::torch
