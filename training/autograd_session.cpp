#include "training/autograd_session.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <set>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "inference/precision.h"
#include "training/without_defaults.h"

namespace onyx {

namespace {

/// The compiled graphs of one mode (training or inference), built on first use.
struct ModeGraphs {
  std::unique_ptr<Session> plain;     // forward only: need_grad = false
  std::unique_ptr<Session> forward;   // forward + the activations backward reads
  std::unique_ptr<Session> backward;  // seeds + saved + parameter views -> gradients
  std::vector<std::string> saved;     // forward outputs the backward reads
  std::vector<std::string> seeds;     // backward inputs: one per model output
  std::vector<std::string> grads;     // backward outputs, in wrt order
  std::vector<std::string> wrt_read;  // wrt values (parameters, inputs) the backward reads
  std::set<std::string> wrt;          // what gradients exist for (parameters, float inputs)
  /// (buffer, value holding its new value); training mode only.
  std::vector<std::pair<std::string, std::string>> updates;
};

/// The parameters and buffers `m` still holds as initializers: they become plain inputs,
/// which every call feeds (the caller's memory, or the model's value for buffers left out).
std::unique_ptr<Model> fed_inputs(const Model& m, const std::vector<std::string>& params,
                                  const std::vector<std::string>& buffers) {
  std::set<std::string> fed;
  for (const auto* names : {&params, &buffers})
    for (const auto& n : *names)
      if (m.graph->initializers.count(n)) fed.insert(n);
  return without_defaults(m, fed);
}

SessionOptions session_options(const AutogradOptions& o) {
  SessionOptions so;
  so.intra_op_threads = o.threads;
  // Parameters are graph inputs here, so folding cannot bake them in; fusions still apply.
  so.opt_level = o.opt_level;
  return so;
}

}  // namespace

struct AutogradSession::Saved {
  int mode = 0;
  /// Backward feeds that come from the forward call: saved activations and the parameter and
  /// input views the backward reads (which keep the caller's memory alive).
  NamedTensors feeds;
  /// Forward outputs' shapes, for zero seeds where the caller gives no gradient.
  std::vector<Shape> output_shapes;
  std::vector<DataType> output_types;
};

struct AutogradSession::Impl {
  std::unique_ptr<Model> model;  // canonical form (prepare_for_training), inference mode as given
  AutogradOptions options;
  std::vector<IoInfo> inputs, outputs;
  std::vector<std::string> params, buffers, diff_inputs;
  std::vector<autodiff::MissingGradient> missing;
  mutable std::once_flag once[2];
  mutable ModeGraphs modes[2];
  mutable std::exception_ptr build_error[2];

  const ModeGraphs& mode(bool training) const {
    int m = training ? 1 : 0;
    std::call_once(once[m], [&] {
      try {
        build(training, modes[m]);
      } catch (...) {
        build_error[m] = std::current_exception();
      }
    });
    if (build_error[m]) std::rethrow_exception(build_error[m]);
    return modes[m];
  }

  void build(bool training, ModeGraphs& mg) const {
    auto moded = clone_model(*model);
    mg.updates = autodiff::set_training_mode(*moded->graph, training, options.unbiased_running_var);
    // Parameters and buffers become plain inputs before differentiation, so what the backward
    // reads of them comes from this call's feeds, never from frozen copies of the initializers.
    auto m = fed_inputs(*moded, params, buffers);
    SessionOptions so = session_options(options);
    {
      auto plain = clone_model(*m);
      for (const auto& [buf, upd] : mg.updates) plain->graph->outputs.push_back(plain->graph->find_value(upd));
      mg.plain = std::make_unique<Session>(std::move(plain), so);
    }
    std::vector<std::string> wrt = params;
    wrt.insert(wrt.end(), diff_inputs.begin(), diff_inputs.end());
    mg.wrt.insert(wrt.begin(), wrt.end());
    if (wrt.empty() || !missing.empty()) return;  // forward() refuses need_grad then
    auto bg = autodiff::build_backward_graphs(*m, wrt);
    for (const auto& [buf, upd] : mg.updates) {
      Value* v = bg.forward->graph->find_value(upd);
      ONYX_CHECK(v, "[autograd] the running statistic output '{}' vanished from the forward graph", upd);
      bg.forward->graph->outputs.push_back(v);
    }
    mg.saved = bg.saved;
    mg.seeds = bg.seeds;
    mg.grads = bg.grads;
    std::set<std::string> fed(bg.saved.begin(), bg.saved.end());
    fed.insert(bg.seeds.begin(), bg.seeds.end());
    for (Value* in : bg.backward->graph->inputs)
      if (!fed.count(in->name)) mg.wrt_read.push_back(in->name);
    mg.forward = std::make_unique<Session>(std::move(bg.forward), so);
    mg.backward = std::make_unique<Session>(std::move(bg.backward), so);
  }

  void check_count(const char* what, size_t got, size_t want) const {
    ONYX_CHECK(got == want, "[autograd] model '{}': expected {} {} but got {}", model->graph->name,
               want, what, got);
  }

  NamedTensors feeds(const std::vector<Tensor>& in, const std::vector<Tensor>& p,
                     const std::vector<Tensor>& b) const {
    NamedTensors f;
    check_count("inputs", in.size(), inputs.size());
    check_count("parameters", p.size(), params.size());
    if (!b.empty()) check_count("buffers (or none, for the model's own values)", b.size(), buffers.size());
    else
      for (const auto& name : buffers) f[name] = model->graph->initializers.at(name);
    for (size_t i = 0; i < in.size(); ++i) f[inputs[i].name] = in[i];
    for (size_t i = 0; i < p.size(); ++i) {
      const Tensor& want = model->graph->initializers.at(params[i]);
      ONYX_CHECK(p[i].dtype() == want.dtype() && p[i].shape() == want.shape(),
                 "[autograd] parameter '{}': expected {} {} but got {} {}", params[i],
                 dtype_name(want.dtype()), shape_str(want.shape()), dtype_name(p[i].dtype()),
                 shape_str(p[i].shape()));
      f[params[i]] = p[i];
    }
    for (size_t i = 0; i < b.size(); ++i) {
      const Tensor& want = model->graph->initializers.at(buffers[i]);
      ONYX_CHECK(b[i].dtype() == want.dtype() && b[i].shape() == want.shape(),
                 "[autograd] buffer '{}': expected {} {} but got {} {}", buffers[i],
                 dtype_name(want.dtype()), shape_str(want.shape()), dtype_name(b[i].dtype()),
                 shape_str(b[i].shape()));
      f[buffers[i]] = b[i];
    }
    return f;
  }
};

AutogradSession::AutogradSession(std::unique_ptr<Model> forward, const AutogradOptions& options)
    : impl_(std::make_unique<Impl>()) {
  ONYX_CHECK(forward && forward->graph, "[autograd] no model given");
  Impl& s = *impl_;
  s.options = options;
  s.model = std::move(forward);
  autodiff::prepare_for_training(*s.model);
  // Before the parameters are split off: each weight's Cast then sits in the forward graph and
  // its gradient rule returns float32 gradients.
  autocast_for_providers(*s.model, options.precision);
  Graph& g = *s.model->graph;
  auto float_initializer = [&](const std::string& name, const char* what) {
    ONYX_CHECK(g.initializers.count(name), "[autograd] model '{}' has no initializer named '{}' "
               "(listed as a {})", g.name, name, what);
    DataType dt = g.initializers.at(name).dtype();
    ONYX_CHECK(is_float(dt), "[autograd] {} '{}' is {}; only floating-point initializers can be {}s",
               what, name, dtype_name(dt), what);
  };
  std::set<std::string> seen;
  for (const auto& b : options.buffers) {
    float_initializer(b, "buffer");
    ONYX_CHECK(seen.insert(b).second, "[autograd] '{}' is listed twice", b);
  }
  s.buffers = options.buffers;
  if (options.parameters.empty()) {
    for (const auto& [name, t] : g.initializers)
      if (is_float(t.dtype()) && t.rank() >= 1 && !seen.count(name)) s.params.push_back(name);
    std::sort(s.params.begin(), s.params.end());
  } else {
    for (const auto& p : options.parameters) {
      float_initializer(p, "parameter");
      ONYX_CHECK(seen.insert(p).second, "[autograd] '{}' is listed twice (as a parameter and "
                 "as a parameter or buffer)", p);
    }
    s.params = options.parameters;
  }
  for (Value* in : g.inputs) {
    if (g.is_initializer(in)) continue;
    s.inputs.push_back({in->name, in->type});
    if (in->type.is_tensor() && is_float(in->type.elem)) s.diff_inputs.push_back(in->name);
  }
  for (Value* out : g.outputs) s.outputs.push_back({out->name, out->type});
  s.missing = autodiff::missing_gradients(*s.model);
}

AutogradSession::~AutogradSession() = default;
AutogradSession::AutogradSession(AutogradSession&&) noexcept = default;
AutogradSession& AutogradSession::operator=(AutogradSession&&) noexcept = default;

const std::vector<IoInfo>& AutogradSession::inputs() const { return impl_->inputs; }
const std::vector<IoInfo>& AutogradSession::outputs() const { return impl_->outputs; }
const std::vector<std::string>& AutogradSession::parameter_names() const { return impl_->params; }
const std::vector<std::string>& AutogradSession::buffer_names() const { return impl_->buffers; }
const std::vector<autodiff::MissingGradient>& AutogradSession::missing_gradients() const {
  return impl_->missing;
}

Tensor AutogradSession::initializer(const std::string& name) const {
  const auto& inits = impl_->model->graph->initializers;
  auto it = inits.find(name);
  ONYX_CHECK(it != inits.end(), "[autograd] model '{}' has no initializer named '{}'",
             impl_->model->graph->name, name);
  return it->second;
}

AutogradSession::ForwardResult AutogradSession::forward(const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& params,
                                                        const std::vector<Tensor>& buffers,
                                                        const ForwardOptions& options) const {
  const Impl& s = *impl_;
  NamedTensors feeds = s.feeds(inputs, params, buffers);
  if (options.need_grad && !s.missing.empty()) {
    std::string list;
    for (const auto& m : s.missing)
      list += fmt::format("\n  {} '{}': {}", m.op_type, m.node, m.why);
    ONYX_THROW("[autograd] model '{}' cannot be differentiated; {} node(s) on a path from a "
               "parameter to an output have no gradient:{}", s.model->graph->name,
               s.missing.size(), list);
  }
  const ModeGraphs& mg = s.mode(options.training);
  RunOptions ro;
  ro.seed = options.seed;
  std::vector<std::string> names;
  for (const auto& o : s.outputs) names.push_back(o.name);
  for (const auto& [buf, upd] : mg.updates) names.push_back(upd);
  bool grad = options.need_grad && mg.forward;
  if (grad) names.insert(names.end(), mg.saved.begin(), mg.saved.end());
  NamedTensors out = (grad ? *mg.forward : *mg.plain).run(feeds, names, ro);

  ForwardResult r;
  for (const auto& o : s.outputs) r.outputs.push_back(out.at(o.name));
  for (const auto& [buf, upd] : mg.updates)
    if (std::find(s.buffers.begin(), s.buffers.end(), buf) != s.buffers.end())
      r.state_updates.emplace_back(buf, out.at(upd));
  if (grad) {
    auto saved = std::make_shared<Saved>();
    saved->mode = options.training ? 1 : 0;
    for (const auto& n : mg.saved) saved->feeds[n] = out.at(n);
    for (const auto& n : mg.wrt_read) saved->feeds[n] = feeds.at(n);
    for (const Tensor& t : r.outputs) {
      saved->output_shapes.push_back(t.shape());
      saved->output_types.push_back(t.dtype());
    }
    r.saved = std::move(saved);
  }
  return r;
}

AutogradSession::Gradients AutogradSession::backward(const Saved& saved,
                                                     const std::vector<Tensor>& output_grads) const {
  const Impl& s = *impl_;
  const ModeGraphs& mg = s.mode(saved.mode == 1);
  s.check_count("output gradients", output_grads.size(), s.outputs.size());
  NamedTensors feeds = saved.feeds;
  for (size_t i = 0; i < output_grads.size(); ++i) {
    const Tensor& g = output_grads[i];
    if (!g.storage()) {
      feeds[mg.seeds[i]] = Tensor::zeros(saved.output_types[i], saved.output_shapes[i]);
      continue;
    }
    ONYX_CHECK(g.dtype() == saved.output_types[i] && g.shape() == saved.output_shapes[i],
               "[autograd] gradient of output '{}': expected {} {} (the output's) but got {} {}",
               s.outputs[i].name, dtype_name(saved.output_types[i]),
               shape_str(saved.output_shapes[i]), dtype_name(g.dtype()), shape_str(g.shape()));
    feeds[mg.seeds[i]] = g;
  }
  NamedTensors out = mg.backward->run(feeds, mg.grads);
  Gradients r;
  size_t k = 0;
  for (size_t i = 0; i < s.params.size(); ++i) r.params.push_back(out.at(mg.grads[k++]));
  for (const auto& in : s.inputs) {
    bool differentiable = std::find(s.diff_inputs.begin(), s.diff_inputs.end(), in.name) != s.diff_inputs.end();
    r.inputs.push_back(differentiable ? out.at(mg.grads[k++]) : Tensor());
  }
  return r;
}

}  // namespace onyx
