// Loss builders: append a scalar loss to a forward graph as plain ONNX nodes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace onyx::autodiff {

struct LossSpec {
  /// "output" (the model's own scalar output is the loss), "softmax_cross_entropy",
  /// "nll" (negative log-likelihood of log-probabilities), "mse", "l1", "huber",
  /// "bce_with_logits".
  std::string kind = "softmax_cross_entropy";
  /// Model output fed to the loss (for "output": the loss itself). Empty: the first output.
  std::string output;
  /// Name of the label input the loss adds (not used by "output").
  std::string labels = "labels";
  /// "mean", "sum" or "none" (none: the per-element losses are summed for training).
  std::string reduction = "mean";
  /// Cross-entropy / NLL: the axis of the scores that holds the classes. 1 is ONNX's and
  /// torch.nn.CrossEntropyLoss's layout ([N, C, d...], labels [N, d...]); -1 (or rank - 1)
  /// takes language-model logits [N, S, C] with labels [N, S] as they come.
  int64_t class_axis = 1;
  /// Cross-entropy / NLL: targets equal to this are ignored (as in ONNX).
  std::optional<int64_t> ignore_index;
  /// Cross-entropy / NLL: an initializer of per-class weights (optional).
  std::string weight;
  /// Huber: the switch point between quadratic and linear.
  double delta = 1.0;
};

/// Loss kinds accepted in LossSpec::kind.
const std::vector<std::string>& loss_kinds();

/// What append_loss added.
struct LossNodes {
  Value* loss = nullptr;    // scalar
  Value* labels = nullptr;  // new graph input (nullptr for "output")
};

/// Appends the loss to `model`'s graph (which must be typed by shape inference). Labels are
/// int64 class indices of shape [N, d1...] for cross-entropy/NLL, and the prediction's dtype
/// and shape for the regression losses. onyx::Error names unknown outputs or kinds.
LossNodes append_loss(Model& model, const LossSpec& spec);

}  // namespace onyx::autodiff
