// onyx::TrainingSession: train an ONNX model on the same engine that runs it.
//
//   onyx::TrainingConfig cfg;
//   cfg.loss.kind = "softmax_cross_entropy";           // on the model's first output
//   cfg.optimizer = {.name = "adamw", .lr = 1e-3, .weight_decay = 0.01};
//   onyx::TrainingSession ts("mlp.onnx", cfg);
//   for (auto& [x, y] : batches) double loss = ts.train_step({{"x", x}, {"labels", y}});
//   ts.save_checkpoint("ckpt.onyx");
//   ts.export_inference_model("trained.onnx");         // runs in onyx::Session
//
// Parameters and gradients live in two flat float32 buffers with one view per parameter;
// the optimizer updates them in one fused pass. A step that fails (bad batch, NaN or
// infinite loss or gradient) throws onyx::Error and changes no weights.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/loss.h"
#include "autodiff/recompute.h"
#include "distributed/communicator.h"
#include "distributed/data_parallel.h"
#include "inference/session.h"
#include "optimizers/loss_scaler.h"
#include "optimizers/lr_schedule.h"
#include "optimizers/optimizer.h"

namespace onyx {

/// A parameter group, as in torch.optim's param_groups: parameters whose names the regex
/// `match` finds (std::regex_search, ECMAScript) take this base learning rate and/or weight
/// decay; the schedule scales every group's rate alike. The first matching group wins.
struct ParamGroup {
  std::string match;
  std::optional<double> lr;            // base rate instead of OptimizerConfig::lr
  std::optional<double> weight_decay;  // instead of OptimizerConfig::weight_decay (also for 1-D)
};

struct TrainingConfig {
  autodiff::LossSpec loss;
  optim::OptimizerConfig optimizer;
  optim::LrSchedule schedule;
  /// Micro-batches whose gradients are averaged before one optimizer step.
  int accumulation_steps = 1;
  /// Clip gradients to this global L2 norm before the step; 0 disables clipping.
  double clip_norm = 0.0;
  /// Seeds Dropout (each step draws from seed and step, so a resumed run continues the same
  /// sequence).
  uint64_t seed = 0;
  /// Intra-op threads; 0 means one per core.
  int threads = 0;
  /// Parameters to train; empty: every float initializer that reaches the loss.
  std::vector<std::string> trainable;
  /// Apply weight decay to 1-D parameters (biases, norm scales) too; off by default (the
  /// usual "no decay for biases and norms"; torch.optim decays everything: set it to match).
  bool decay_1d = false;
  /// Per-group learning rates and weight decay (see ParamGroup).
  std::vector<ParamGroup> param_groups;
  /// Parameters whose names match any of these regexes stay frozen: not trained, no
  /// gradient computed. A regex that matches no parameter is an error (a typo would
  /// otherwise train what was meant to stay frozen).
  std::vector<std::string> freeze;
  /// Activation recomputation: forward segments whose activations backward recomputes
  /// instead of keeping (autodiff/recompute.h); less memory, the same gradients. With
  /// `recompute.budget_bytes` the segments are chosen for the planned peak to fit the budget,
  /// sized for `recompute.input_shapes`, else for the model's fixed input shapes, else for the
  /// first batch's shapes (the training graph is then rebuilt at the first train_step, which
  /// throws when the budget cannot be met). The choice is in recompute_report().
  autodiff::RecomputeSpec recompute;
  /// Data-parallel training: each rank trains on its own slice of every global batch;
  /// gradients are averaged over ranks bucket by bucket while backward runs (see
  /// distributed/data_parallel.h). Parameters start from rank 0's. N ranks with batch b
  /// train like one process with batch N*b (mean-reduced losses, no BatchNorm).
  std::shared_ptr<dist::Communicator> communicator;
  dist::BucketConfig buckets;
  /// Mixed precision (graph/autocast.h): bf16 or fp16 runs matrix products and convolutions,
  /// forward and backward, in that format and softmax, norms, reductions and the loss in
  /// float32. Parameters, gradients and optimizer state stay float32 (master weights); the
  /// optimizer's update also writes each weight's 16-bit copy, which the next forward reads
  /// (training/low_precision_weights.h), and gradients come back in float32.
  Precision precision = Precision::Float32;
  /// With `precision` bf16/fp16: the 16-bit weights come from the copy the optimizer writes
  /// (true) or from the training graph's Cast of each weight every step (false, as the saved
  /// training graph does it). Both give the same bits; the copy saves a pass over the weights.
  /// Writing parameters through a view (parameter(), flat_parameters()) is seen either way: once
  /// a view has been handed out, the copy is refreshed from the float32 weights before each step.
  bool low_precision_weight_copies = true;
  /// Dynamic loss scaling (optimizers/loss_scaler.h, torch.amp.GradScaler's rules), on for
  /// fp16; bf16 has float32's range and needs none. A step whose gradients overflow is
  /// skipped (StepResult::skipped), not an error.
  optim::LossScalerConfig loss_scaler;
  /// Denormal floats read and written as zero in the training graph's runs
  /// (SessionOptions::flush_denormals) and in the update passes after them (gradient norm and
  /// checks, the optimizer step: optim::DenormalsAsZero): on Intel CPUs a language model's early
  /// logits gradients, mostly denormals, made its steps 17x slower, and its AdamW moments, sunk
  /// into denormals, the optimizer step 2x slower. Activations, gradients and moments below
  /// 1.2e-38 become 0, as under TensorFlow's and XLA's CPU defaults and
  /// torch.set_flush_denormal(True); off keeps them.
  bool flush_denormals = true;
  /// Non-empty: record a Chrome-trace event per node of every training-graph run (forward,
  /// backward and loss; not the optimizer step), written to this file by end_profiling().
  std::string profile_path;
};

/// What one train_step did.
struct StepResult {
  double loss = 0;
  double lr = 0;          // learning rate of the optimizer step (0 when none was taken)
  double grad_norm = 0;   // global norm before clipping (when a step was taken)
  bool stepped = false;   // true on the last micro-batch of an accumulation group
  size_t peak_bytes = 0;  // most intermediate bytes the training graph held at once
  /// fp16: the loss scale this step ran with; 0 without loss scaling.
  double loss_scale = 0;
  /// fp16: the gradients held an inf or NaN, so the loss scaler skipped the optimizer step
  /// (and lowered the scale); the micro-batches of the group are spent.
  bool skipped = false;
  /// Data parallel: how long this call waited, after backward, for its gradient allreduces
  /// (the communication that backward did not hide); 0 without a communicator.
  double comm_wait_ms = 0;
};

class TrainingSession {
 public:
  /// Loads the forward model, builds the training and evaluation graphs and the optimizer.
  TrainingSession(const std::string& model_path, const TrainingConfig& config);
  TrainingSession(std::unique_ptr<Model> forward, const TrainingConfig& config);
  ~TrainingSession();
  TrainingSession(TrainingSession&&) noexcept;
  TrainingSession& operator=(TrainingSession&&) noexcept;

  /// Forward + loss + backward on one micro-batch (inputs and labels by name); every
  /// `accumulation_steps` calls the averaged gradients are clipped and applied. Returns the loss.
  double train_step(const NamedTensors& batch);
  StepResult train_step_detailed(const NamedTensors& batch);
  /// Forward + loss in inference mode (Dropout off, BatchNorm running statistics), with the
  /// current weights. Returns "loss" and the model's outputs.
  NamedTensors eval_step(const NamedTensors& batch) const;
  /// The model's outputs only (no labels needed).
  NamedTensors predict(const NamedTensors& inputs) const;

  const std::vector<std::string>& parameter_names() const;
  /// A view of the parameter's current value (shares the flat buffer; valid while the
  /// session lives). onyx::Error for unknown names.
  Tensor parameter(const std::string& name) const;
  /// Overwrites a parameter (shape and dtype must match).
  void set_parameter(const std::string& name, const Tensor& value);
  /// The flat buffers (data-parallel training reduces gradients over them).
  Tensor flat_parameters() const;
  Tensor flat_gradients() const;

  /// Optimizer steps taken so far (steps the loss scaler skipped do not count).
  int64_t step() const;
  /// The loss scaler's current scale (fp16), 0 without one.
  double loss_scale() const;
  /// Writes the profile of the training-graph runs so far (TrainingConfig::profile_path) and
  /// returns its path; onyx::Error when profiling is off.
  std::string end_profiling() const;
  /// Learning rate the next optimizer step will use.
  double learning_rate() const;
  /// Names of the inputs a batch must provide (model inputs, then labels).
  const std::vector<std::string>& batch_inputs() const;
  const TrainingConfig& config() const;

  /// Writes parameters, optimizer state, step, schedule and RNG state atomically (temporary
  /// file, fsync, rename): a crash mid-save leaves the previous checkpoint intact. Under
  /// data parallelism rank 0 writes after a barrier and every rank learns whether it worked;
  /// the file does not depend on the number of ranks.
  void save_checkpoint(const std::string& path) const;
  /// Restores a checkpoint of this model; onyx::Error for a corrupt file or one written for
  /// another model or optimizer. Training continues bit-identically.
  void load_checkpoint(const std::string& path);
  /// The forward model with the trained weights (and running statistics) folded back in.
  std::unique_ptr<Model> inference_model() const;
  void export_inference_model(const std::string& path) const;
  /// The training graph (forward + loss + backward) as plain ONNX.
  const Model& training_model() const;
  /// Data parallelism: the number of gradient buckets (0 without a communicator).
  size_t num_gradient_buckets() const;
  /// What activation recomputation chose (segments, planned peak before and after); all zero
  /// without recomputation and, with a budget planned from the first batch, until it is run.
  const autodiff::RecomputeReport& recompute_report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
