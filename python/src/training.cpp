// onyx.TrainingSession: onyx::TrainingSession with its TrainingConfig as keyword arguments.
// Batches are viewed (DLPack); the GIL is released while a step runs, and a mutex keeps two
// Python threads from stepping one session at once (TrainingSession is not thread-safe).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <mutex>

#include "bindings.h"
#include "graph/onnx_io.h"
#include "training/training_session.h"

namespace onyx::py {

using namespace nb::literals;

namespace {

struct PyTrainingSession {
  std::unique_ptr<TrainingSession> session;
  mutable std::mutex mutex;
};

NamedTensors batch_from_dict(const nb::dict& batch) {
  NamedTensors out;
  for (auto [key, value] : batch) {
    if (!PyUnicode_Check(key.ptr())) throw nb::type_error("[python] batch keys must be input names (str)");
    std::string name = nb::cast<std::string>(key);
    out[name] = to_tensor(value, "batch '" + name + "'", Convert::CopyIfNeeded);
  }
  return out;
}

nb::dict numpy_dict(const NamedTensors& tensors) {
  nb::dict out;
  for (const auto& [name, t] : tensors) out[nb::str(name.c_str())] = to_numpy(t);
  return out;
}

/// torch.optim style groups: [{"match": regex, "lr": 1e-4, "weight_decay": 0.0}, ...].
std::vector<ParamGroup> param_groups_from(const nb::list& groups) {
  std::vector<ParamGroup> out;
  for (nb::handle item : groups) {
    if (!nb::isinstance<nb::dict>(item))
      throw nb::type_error("[python] param_groups: each group is a dict with 'match' and "
                           "'lr' and/or 'weight_decay'");
    nb::dict g = nb::borrow<nb::dict>(item);
    ParamGroup group;
    for (auto [key, value] : g) {
      std::string k = nb::cast<std::string>(key);
      if (k == "match") group.match = nb::cast<std::string>(value);
      else if (k == "lr") group.lr = nb::cast<double>(value);
      else if (k == "weight_decay") group.weight_decay = nb::cast<double>(value);
      else ONYX_THROW("[python] param_groups: unknown key '{}' (expected match, lr, weight_decay)", k);
    }
    ONYX_CHECK(!group.match.empty(), "[python] param_groups: a group needs a 'match' regex");
    out.push_back(std::move(group));
  }
  return out;
}

template <typename F>
auto locked(const PyTrainingSession& s, F&& f) {
  nb::gil_scoped_release unlocked;
  std::lock_guard lock(s.mutex);
  return f(*s.session);
}

}  // namespace

void bind_training(nb::module_& m) {
  nb::class_<PyTrainingSession>(
      m, "TrainingSession",
      "Trains an ONNX model: appends the loss, derives the backward graph and updates the "
      "weights with a fused optimizer (onyx::TrainingSession).")
      .def(
          "__init__",
          [](PyTrainingSession* self, nb::handle model, const std::string& loss,
             std::optional<std::string> output, const std::string& labels,
             const std::string& reduction, int64_t class_axis, std::optional<int64_t> ignore_index,
             double huber_delta, const std::string& optimizer, double lr, double momentum,
             bool nesterov, double weight_decay, std::pair<double, double> betas, double eps,
             bool decay_1d, const std::string& schedule, int64_t warmup_steps, int64_t total_steps,
             int64_t step_size, double gamma, double min_lr, double clip_norm,
             int accumulation_steps, uint64_t seed, int threads,
             std::vector<std::string> trainable, std::vector<std::string> freeze,
             const nb::list& param_groups, std::optional<std::string> recompute,
             int recompute_every, const std::string& precision, double init_loss_scale,
             int64_t loss_scale_interval, bool flush_denormals) {
            TrainingConfig c;
            c.loss.kind = loss;
            c.loss.output = output.value_or("");
            c.loss.labels = labels;
            c.loss.reduction = reduction;
            c.loss.class_axis = class_axis;
            c.loss.ignore_index = ignore_index;
            c.loss.delta = huber_delta;
            c.optimizer = {.name = optimizer, .lr = lr, .momentum = momentum,
                           .nesterov = nesterov, .weight_decay = weight_decay,
                           .beta1 = betas.first, .beta2 = betas.second, .eps = eps};
            c.decay_1d = decay_1d;
            c.schedule = {.kind = schedule, .warmup_steps = warmup_steps,
                          .total_steps = total_steps, .step_size = step_size, .gamma = gamma,
                          .min_lr = min_lr};
            c.clip_norm = clip_norm;
            c.accumulation_steps = accumulation_steps;
            c.seed = seed;
            c.threads = threads;
            c.trainable = std::move(trainable);
            c.freeze = std::move(freeze);
            c.param_groups = param_groups_from(param_groups);
            c.recompute = {.pattern = recompute.value_or(""), .every = recompute_every};
            c.precision = parse_precision(precision);
            c.loss_scaler.init_scale = init_loss_scale;
            c.loss_scaler.growth_interval = loss_scale_interval;
            c.flush_denormals = flush_denormals;
            std::unique_ptr<Model> forward = load_model_arg(model);
            auto* s = new (self) PyTrainingSession();
            try {
              nb::gil_scoped_release unlocked;
              s->session = std::make_unique<TrainingSession>(std::move(forward), c);
            } catch (...) {
              s->~PyTrainingSession();
              throw;
            }
          },
          "model"_a, nb::kw_only(), "loss"_a = "softmax_cross_entropy", "output"_a = nb::none(),
          "labels"_a = "labels", "reduction"_a = "mean", "class_axis"_a = 1,
          "ignore_index"_a = nb::none(), "huber_delta"_a = 1.0, "optimizer"_a = "adamw",
          "lr"_a = 1e-3, "momentum"_a = 0.0, "nesterov"_a = false, "weight_decay"_a = 0.0,
          "betas"_a = std::make_pair(0.9, 0.999), "eps"_a = 1e-8, "decay_1d"_a = false,
          "schedule"_a = "constant", "warmup_steps"_a = 0, "total_steps"_a = 0,
          "step_size"_a = 1, "gamma"_a = 0.1, "min_lr"_a = 0.0, "clip_norm"_a = 0.0,
          "accumulation_steps"_a = 1, "seed"_a = 0, "threads"_a = 0,
          "trainable"_a = std::vector<std::string>{}, "freeze"_a = std::vector<std::string>{},
          "param_groups"_a = nb::list(), "recompute"_a = nb::none(), "recompute_every"_a = 1,
          "precision"_a = "fp32", "init_loss_scale"_a = 65536.0, "loss_scale_interval"_a = 2000,
          "flush_denormals"_a = true,
          R"(model: path or serialized bytes of the forward ONNX model.
loss: output (the model's own scalar output), softmax_cross_entropy, nll, mse, l1, huber,
  bce_with_logits; on `output` (default: the first output), labels fed as `labels`.
optimizer: sgd (momentum, nesterov), adam, adamw, lamb (betas, eps); weight_decay is L2 for
  sgd/adam, decoupled for adamw/lamb, and skips 1-D parameters unless decay_1d.
schedule: constant, linear, cosine (warmup_steps, total_steps, min_lr), step (step_size, gamma).
trainable: parameters to train (default: every float initializer reaching the loss);
freeze: regexes of parameters kept fixed; param_groups: [{"match": regex, "lr": .., "weight_decay": ..}].
recompute: regex of forward nodes whose activations backward recomputes (recompute_every: every
  k-th segment). threads: intra-op threads (0: one per core).
precision: fp32, or bf16/fp16 mixed precision (float32 master weights); fp16 scales the loss
  dynamically as torch.amp.GradScaler (init_loss_scale, loss_scale_interval).
flush_denormals: denormal floats read and written as zero in the training graph's runs (on
  Intel CPUs each operation on one takes ~100x its time); False keeps them.)")
      .def("train_step",
           [](const PyTrainingSession& s, const nb::dict& batch) {
             NamedTensors b = batch_from_dict(batch);
             return locked(s, [&](TrainingSession& ts) { return ts.train_step(b); });
           },
           "batch"_a, "Forward, loss, backward (and an optimizer step every accumulation_steps "
           "calls) on one batch of inputs and labels; returns the loss.")
      .def("train_step_detailed",
           [](const PyTrainingSession& s, const nb::dict& batch) {
             NamedTensors b = batch_from_dict(batch);
             StepResult r = locked(s, [&](TrainingSession& ts) { return ts.train_step_detailed(b); });
             nb::dict d;
             d["loss"] = r.loss;
             d["lr"] = r.lr;
             d["grad_norm"] = r.grad_norm;
             d["stepped"] = r.stepped;
             d["skipped"] = r.skipped;
             d["loss_scale"] = r.loss_scale;
             d["peak_bytes"] = r.peak_bytes;
             return d;
           },
           "batch"_a, "As train_step; returns loss, lr, grad_norm, stepped, peak_bytes and, for "
           "fp16, skipped (the loss scaler skipped an overflowing step) and loss_scale.")
      .def("eval_step",
           [](const PyTrainingSession& s, const nb::dict& batch) {
             NamedTensors b = batch_from_dict(batch);
             return numpy_dict(locked(s, [&](TrainingSession& ts) { return ts.eval_step(b); }));
           },
           "batch"_a, "Loss (\"loss\") and the model's outputs in inference mode.")
      .def("predict",
           [](const PyTrainingSession& s, const nb::dict& inputs) {
             NamedTensors b = batch_from_dict(inputs);
             return numpy_dict(locked(s, [&](TrainingSession& ts) { return ts.predict(b); }));
           },
           "inputs"_a, "The model's outputs with the current weights (no labels needed).")
      .def_prop_ro("parameter_names",
                   [](const PyTrainingSession& s) { return s.session->parameter_names(); })
      .def_prop_ro("batch_inputs",
                   [](const PyTrainingSession& s) { return s.session->batch_inputs(); },
                   "Names a batch provides: the model's inputs, then the labels.")
      .def_prop_ro("step", [](const PyTrainingSession& s) { return s.session->step(); },
                   "Optimizer steps taken.")
      .def_prop_ro("learning_rate",
                   [](const PyTrainingSession& s) { return s.session->learning_rate(); },
                   "Learning rate of the next optimizer step.")
      .def("parameter",
           [](const PyTrainingSession& s, const std::string& name) {
             return to_numpy(s.session->parameter(name));
           },
           "name"_a, "A numpy view of the parameter's live value: it changes as training steps.")
      .def("set_parameter",
           [](PyTrainingSession& s, const std::string& name, nb::handle value) {
             Tensor v = to_tensor(value, "parameter '" + name + "'", Convert::CopyIfNeeded);
             locked(s, [&](TrainingSession& ts) {
               ts.set_parameter(name, v);
               return 0;
             });
           },
           "name"_a, "value"_a)
      .def("save_checkpoint",
           [](const PyTrainingSession& s, const std::string& path) {
             locked(s, [&](TrainingSession& ts) {
               ts.save_checkpoint(path);
               return 0;
             });
           },
           "path"_a)
      .def("load_checkpoint",
           [](PyTrainingSession& s, const std::string& path) {
             locked(s, [&](TrainingSession& ts) {
               ts.load_checkpoint(path);
               return 0;
             });
           },
           "path"_a)
      .def("export_inference_model",
           [](const PyTrainingSession& s, std::optional<std::string> path) -> nb::object {
             std::string bytes = locked(s, [&](TrainingSession& ts) {
               if (path) ts.export_inference_model(*path);
               return path ? std::string() : serialize_model(*ts.inference_model());
             });
             if (path) return nb::none();
             return nb::bytes(bytes.data(), bytes.size());
           },
           "path"_a = nb::none(),
           "Writes the forward model with the trained weights to `path` (runs in "
           "onyx.InferenceSession and ONNX Runtime); without a path, returns its bytes.");
}

}  // namespace onyx::py
