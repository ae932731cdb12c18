// onyx::torch::OnnxModule: an ONNX model as a torch::nn::Module. onyx runs the forward and the
// backward (onyx::AutogradSession); libtorch owns the loss, the optimizer and the weights.
//
//   auto net = std::make_shared<onyx::torch::OnnxModule>("mlp.onnx");
//   torch::optim::SGD opt(net->parameters(), /*lr=*/0.1);
//   for (auto& [x, y] : batches) {
//     opt.zero_grad();
//     at::Tensor loss = torch::cross_entropy_loss(net->forward({x})[0], y);
//     loss.backward();     // gradients of the ONNX graph, computed by onyx
//     opt.step();          // updates the parameters in place; onyx reads them on the next call
//   }
//
// Parameters: each trainable float initializer becomes a torch parameter holding a copy of the
// model's value; BatchNormalization running statistics become buffers. Dotted ONNX names nest as
// torch nests them ("fc1.weight" is parameter "weight" of submodule "fc1"), so
// named_parameters(), named_buffers(), torch::save and torch::load use the names torch gives
// the module the model was exported from, and a state saved from that module loads here.
// Every forward feeds the current parameters and buffers to onyx as zero-copy views: an
// optimizer step or a copy_() into a parameter is seen by the next forward.
//
// Modes: train() runs Dropout and BatchNormalization as in training (batch statistics; the
// running statistics are updated in the buffers as torch.nn.BatchNorm updates them: the
// unbiased batch variance, where ONNX's BatchNormalization would take the biased one),
// eval() as in inference.
// Gradients are recorded when grad mode is on and an input or a parameter requires grad;
// otherwise (torch::NoGradGuard, frozen parameters) onyx runs the plain forward graph.
//
// Errors from onyx (a wrong input count, dtype, rank or fixed dimension; a model onyx cannot
// differentiate) are onyx::Error exceptions naming what was expected and found; the module stays
// usable after one.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace onyx {
class AutogradSession;
class Model;
}

namespace onyx::torch {

struct OnnxModuleOptions {
  /// Intra-op threads of onyx's sessions; 0 means one per core.
  int threads = 0;
  /// ONNX initializers to train (float tensors), in the order parameters() lists them. Empty:
  /// every float initializer of rank >= 1 that reaches an output along float values, other than
  /// BatchNormalization running statistics, in order of first use in the graph. The other
  /// initializers stay constants of the model.
  std::vector<std::string> trainable;
};

class OnnxModule : public ::torch::nn::Module {
 public:
  /// Loads an ONNX file (external data resolves against its folder).
  explicit OnnxModule(const std::string& path, const OnnxModuleOptions& options = {});
  /// Loads a serialized ModelProto (external data is refused).
  OnnxModule(const void* data, size_t size, const OnnxModuleOptions& options = {});
  ~OnnxModule() override;

  /// Runs the model on `inputs` (one per model input, in input_names() order; CPU tensors of the
  /// declared dtypes; non-contiguous ones are copied) and returns one tensor per output, in
  /// output_names() order. Differentiable with respect to the parameters and float inputs.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs);

  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  /// ONNX names of the parameters and buffers, in parameters() / buffers() order (the same as
  /// the keys of named_parameters() / named_buffers()).
  const std::vector<std::string>& parameter_names() const;
  const std::vector<std::string>& buffer_names() const;
  /// The session that runs the model (shared with the autograd nodes of pending backwards).
  const std::shared_ptr<AutogradSession>& session() const;

  void pretty_print(std::ostream& stream) const override;

  struct State;  // the session, names and tensor handles; shared with pending backwards

 private:
  void init(std::unique_ptr<Model> model, const OnnxModuleOptions& options, std::string source);

  std::shared_ptr<State> state_;
};

}  // namespace onyx::torch
