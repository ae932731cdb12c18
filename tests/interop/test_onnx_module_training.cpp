// torch::optim on OnnxModule follows torch's own training of the same model: tools/
// gen_torch_models.py trained mlp, cnn_bn and gpt2 for 100 steps with SGD (momentum 0.9) and
// AdamW from the weights in model.onnx, over 10 fixed batches, and stored every step's loss.
// Here torch's optimizers update the OnnxModule's parameters from onyx's gradients; each loss
// must stay within 1e-4 relative of torch's (what tests/training/test_torch_trajectories.cpp
// asks of TrainingSession).
#include <ATen/ops/cross_entropy_loss.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <memory>

#include "interop/onnx_module.h"
#include "torch_data.h"

namespace onyx::torch::test {
namespace {

struct Trajectory {
  std::string model, input, optimizer;
};

void PrintTo(const Trajectory& t, std::ostream* os) { *os << t.model << "/" << t.optimizer; }

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(const std::string& name, const nlohmann::json& c,
                                                          std::vector<at::Tensor> params) {
  if (name == "sgd") {
    EXPECT_EQ(c.at("dampening").get<double>(), 0.0);
    return std::make_unique<::torch::optim::SGD>(params, ::torch::optim::SGDOptions(c.at("lr"))
                                                             .momentum(c.at("momentum"))
                                                             .dampening(c.at("dampening"))
                                                             .nesterov(c.at("nesterov"))
                                                             .weight_decay(c.at("weight_decay")));
  }
  return std::make_unique<::torch::optim::AdamW>(
      params, ::torch::optim::AdamWOptions(c.at("lr"))
                  .betas({c.at("betas")[0].get<double>(), c.at("betas")[1].get<double>()})
                  .eps(c.at("eps"))
                  .weight_decay(c.at("weight_decay")));
}

class TorchOptimizerTrajectory : public testing::TestWithParam<Trajectory> {};

TEST_P(TorchOptimizerTrajectory, LossesMatchTorchAtEveryStep) {
  const Trajectory& p = GetParam();
  const nlohmann::json ref = read_json(torch_data(p.model, "losses.json"));
  auto net = std::make_shared<OnnxModule>(torch_data(p.model, "model.onnx"), OnnxModuleOptions{.threads = 1});
  net->train();  // as torch trained (BatchNormalization on batch statistics)
  auto opt = make_optimizer(p.optimizer, ref.at(p.optimizer).at("config"), net->parameters());
  const at::Tensor inputs = load_npy(p.model, p.input), labels = load_npy(p.model, "labels");
  const auto& losses = ref.at(p.optimizer).at("losses");
  const int64_t steps = ref.at("steps"), nb = ref.at("num_batches");
  ASSERT_EQ(static_cast<int64_t>(losses.size()), steps);
  double worst = 0;
  for (int64_t s = 0; s < steps; ++s) {
    opt->zero_grad();
    const at::Tensor logits = net->forward({inputs[s % nb]})[0];
    const at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                                   labels[s % nb].reshape({-1}));
    loss.backward();
    opt->step();
    const double got = loss.item<double>(), want = losses[s];
    const double rel = std::abs(got - want) / std::abs(want);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-4) << "step " << s << ": onyx + torch::optim " << got << ", torch " << want;
  }
  EXPECT_LT(losses.back().get<double>(), losses.front().get<double>());
  std::cout << p.model << " " << p.optimizer << ": max relative loss difference " << worst << " over "
            << steps << " steps\n";
}

INSTANTIATE_TEST_SUITE_P(Interop, TorchOptimizerTrajectory,
                         testing::Values(Trajectory{"mlp", "x", "sgd"}, Trajectory{"mlp", "x", "adamw"},
                                         Trajectory{"cnn_bn", "x", "sgd"}, Trajectory{"cnn_bn", "x", "adamw"},
                                         Trajectory{"gpt2", "tokens", "sgd"},
                                         Trajectory{"gpt2", "tokens", "adamw"}),
                         [](const testing::TestParamInfo<Trajectory>& p) {
                           return p.param.model + "_" + p.param.optimizer;
                         });

}  // namespace
}  // namespace onyx::torch::test
