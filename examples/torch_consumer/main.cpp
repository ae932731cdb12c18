// Trains an ONNX classifier from a libtorch program through the installed <onyx/torch.h>:
//   torch_consumer MODEL.onnx    MODEL: float input [N, F] -> logits [N, C] (e.g.
//                                tests/data/torch/mlp/model.onnx: F = 16, C = 5)
// One batch of random data, one torch::optim::SGD step on the OnnxModule's parameters; the loss
// on that batch must go down. Also checks that tensors cross without a copy and that
// libonyx_torch.so registered its TorchScript class on load.
#include <onyx/torch.h>

#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <torch/custom_class.h>
#include <torch/optim/sgd.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: torch_consumer MODEL.onnx\n";
    return 2;
  }
  try {
    auto net = std::make_shared<onyx::torch::OnnxModule>(argv[1]);
    std::cout << *net << "\n";
    // The input's feature count and the class count from the parameters' shapes: the first
    // parameter is the first layer's weight [hidden, F], the last-but-one the last layer's [C, hidden].
    const auto params = net->parameters();
    const int64_t features = params.front().size(1), classes = params[params.size() - 2].size(0);
    at::Tensor x = at::randn({8, features});
    at::Tensor labels = at::randint(classes, {8}, at::kLong);

    // Zero-copy both ways.
    onyx::Tensor view = onyx::torch::from_torch(x);
    if (view.raw() != x.data_ptr() || onyx::torch::to_torch(view).data_ptr() != x.data_ptr()) {
      std::cerr << "tensors were copied\n";
      return 1;
    }

    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
    auto loss_of = [&] {
      at::Tensor logits = net->forward({x})[0];
      return at::cross_entropy_loss(logits, labels);
    };
    opt.zero_grad();
    at::Tensor loss = loss_of();
    loss.backward();
    opt.step();
    const double before = loss.item<double>(), after = loss_of().item<double>();
    std::cout << "one SGD step: loss " << before << " -> " << after << "\n";
    if (!(after < before)) {
      std::cerr << "the step did not lower the loss\n";
      return 1;
    }
    const bool registered = torch::isCustomClass(c10::IValue(c10::make_intrusive<onyx::torch::ScriptModel>(argv[1])));
    std::cout << "torch.classes.onyx.Model registered: " << (registered ? "yes" : "no") << "\n";
    if (!registered) return 1;
    std::cout << "torch consumer: ok\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
