// Turning a forward ONNX graph into a training graph (forward + loss + backward), or into
// a forward/backward pair for callers that own the loss (libtorch autograd).
//
//   auto tg = onyx::autodiff::build_training_graph(model, {.kind = "softmax_cross_entropy",
//                                                          .output = "logits"}, {});
//   onyx::save_model(*tg.model, "train.onnx");   // plain ONNX: inputs x, labels, params
//                                                // outputs loss, <param>_grad, ...
// Every emitted node is an ordinary ai.onnx op, so the result can be saved, inspected and
// run by onyx (or any ONNX runtime). Needs ai.onnx opset >= 13; opset 13 is raised to 14
// (no op changed meaning between them) so BatchNormalization can run in training mode.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autodiff/loss.h"
#include "autodiff/recompute.h"
#include "graph/ir.h"

namespace onyx::autodiff {

struct TrainingGraph {
  std::unique_ptr<Model> model;
  std::string loss;                  // graph output: the scalar loss
  std::vector<std::string> params;   // trainable parameters, now graph inputs (initializer = default)
  std::vector<std::string> grads;    // graph output per parameter: "<param>_grad"
  std::vector<std::string> labels;   // inputs the loss added (e.g. "labels")
  /// Non-trainable state the step updates: (input, output holding its new value), e.g.
  /// BatchNormalization running mean/var.
  std::vector<std::pair<std::string, std::string>> state_updates;
  std::vector<std::string> forward_outputs;  // the forward graph's outputs, still produced
  /// Graph input holding dLoss/dLoss, a scalar of the loss's type defaulting to 1; a loss
  /// scaler feeds its scale there.
  std::string loss_seed;
  RecomputeReport recompute;                 // what activation recomputation did
};

/// Forward graph + loss + backward. `trainable` lists parameter initializers; empty means
/// every float initializer that reaches the loss. Dropout runs in training mode and
/// BatchNormalization uses batch statistics (running stats become state_updates).
/// onyx::Error for unknown names, opset < 13, non-scalar loss outputs, or an op on the
/// path from a parameter to the loss that has no gradient rule (named with its node).
/// `recompute` marks forward segments whose activations the backward recomputes
/// (autodiff/recompute.h); gradients are bit-identical with and without it.
TrainingGraph build_training_graph(const Model& forward, const LossSpec& loss,
                                   const std::vector<std::string>& trainable,
                                   const RecomputeSpec& recompute = {});

/// The evaluation twin of a training graph: forward + loss in inference mode, with the
/// same parameter inputs (and labels), so eval_step sees the current weights.
std::unique_ptr<Model> build_eval_graph(const Model& forward, const LossSpec& loss,
                                        const std::vector<std::string>& params);

/// Rewrites `m` into the form the gradient rules expect, in place: ai.onnx opset 7-12 to
/// opset-13 meanings, com.microsoft fused ops into the ops they fuse, opset 13 raised to 14;
/// types and shapes inferred, and sequences that are only indexed (SplitToSequence read by
/// constant SequenceAt) lowered to Slice/Gather, which have gradients.
/// build_training_graph and build_backward_graphs do it themselves; callers that edit the
/// graph first (set_training_mode) call it before.
void prepare_for_training(Model& m);

/// Puts `g` in training mode (Dropout drops, BatchNormalization normalises with batch
/// statistics and outputs new running statistics, which become graph inputs with their
/// initializer as default) or in inference mode (Dropout is the identity, BatchNormalization
/// uses its running statistics), in place. Returns, in training mode, (running statistic,
/// value holding its new value) per BatchNormalization input; the values are not made graph
/// outputs. `unbiased_running_var` follows PyTorch instead of the ONNX specification for the
/// new running variance (the batch variance scaled by n/(n-1) before averaging, n being the
/// values per channel), so a torch module trained through onyx ends with torch's buffers.
/// onyx::Error when a node cannot switch (running statistics that are not initializers, or
/// read by the model in a node asked to stop updating them).
std::vector<std::pair<std::string, std::string>> set_training_mode(Graph& g, bool training,
                                                                   bool unbiased_running_var = false);

/// A node that training would need a gradient through but cannot differentiate.
struct MissingGradient {
  std::string node, op_type, domain;  // node: "loop/body_node" for a node inside a subgraph
  std::string why;  // "no gradient rule", or what a Loop cannot differentiate
};

/// Every node on a differentiable path from a float initializer to an output of `forward`
/// that has no gradient rule, in graph order, looking into the If branches and Loop bodies
/// that read such a path: what `onyx gradcheck` and the front doors report before anything
/// runs. Empty: trainable.
std::vector<MissingGradient> missing_gradients(const Model& forward);

/// Forward/backward split for callers that own the loss.
struct BackwardGraphs {
  /// The forward model plus extra outputs: the activations the backward needs (`saved`).
  std::unique_ptr<Model> forward;
  /// Inputs: `seeds` (one "<output>_grad" per forward output, same shape), then `saved`
  /// (graph inputs the backward reads are among them: the forward passes them through),
  /// then the wrt values it reads. Outputs: `grads` ("<x>_grad" for each wrt, in order).
  std::unique_ptr<Model> backward;
  std::vector<std::string> saved, seeds, grads, wrt;
};

/// Differentiates all outputs of `forward` with respect to `wrt` (graph inputs and/or
/// initializers; initializers named there become graph inputs of both models).
BackwardGraphs build_backward_graphs(const Model& forward, const std::vector<std::string>& wrt);

/// The core: appends to `g` the backward of the nodes between `wrt` and the seeded values.
/// `seeds` maps forward values to their incoming gradients. Returns each wrt value's
/// gradient (a zero tensor when it does not reach any seed).
std::map<Value*, Value*> differentiate(Model& model, const std::map<Value*, Value*>& seeds,
                                       const std::vector<Value*>& wrt);

}  // namespace onyx::autodiff
