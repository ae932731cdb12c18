// PyTorch parity on torch-exported models (tools/gen_torch_models.py writes them, with the
// batches and torch's results, into tests/data/torch; see its header for the models).
//
// Trajectories: mlp, cnn_bn and gpt2 trained by TrainingSession from the weights in the file,
// on the same batches in the same order as torch, with SGD momentum and with AdamW; every
// step's loss must be within 1e-4 relative of torch's.
// Shape coverage: encoder, decoder, mha and bert_block (nn.Transformer* layers,
// nn.MultiheadAttention, Hugging Face-style BERT and LLaMA layers) build a training graph, predict
// torch's forward output, and 5 SGD steps on one batch give torch's losses and lower the loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "graph/error.h"
#include "launcher/npy.h"
#include "training/training_session.h"

namespace onyx::test {

namespace {

std::string data_path(const std::string& model, const std::string& file) {
  return std::string(ONYX_TORCH_TEST_DATA) + "/" + model + "/" + file;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open " + path);
  return nlohmann::json::parse(f);
}

/// stacked[i] of a tensor [NB, ...] (a copy).
Tensor slice(const Tensor& stacked, int64_t i) {
  Shape s(stacked.shape().begin() + 1, stacked.shape().end());
  Tensor t = Tensor::empty(stacked.dtype(), s);
  std::memcpy(t.raw(), static_cast<const char*>(stacked.raw()) + i * t.nbytes(), t.nbytes());
  return t;
}

/// torch's optimizer settings from losses.json, as a TrainingConfig.
TrainingConfig torch_config(const std::string& name, const nlohmann::json& c) {
  TrainingConfig cfg;
  cfg.loss.kind = "softmax_cross_entropy";
  cfg.loss.class_axis = -1;  // [B, C] and [B, T, V] logits alike
  cfg.optimizer.name = name;
  cfg.optimizer.lr = c.at("lr");
  cfg.optimizer.weight_decay = c.at("weight_decay");
  if (name == "sgd") {
    cfg.optimizer.momentum = c.at("momentum");
    cfg.optimizer.nesterov = c.at("nesterov");
    EXPECT_EQ(c.at("dampening").get<double>(), 0.0) << "onyx's SGD has no dampening";
  } else {
    cfg.optimizer.beta1 = c.at("betas")[0];
    cfg.optimizer.beta2 = c.at("betas")[1];
    cfg.optimizer.eps = c.at("eps");
  }
  cfg.decay_1d = true;  // torch.optim decays every parameter it is given
  cfg.threads = 1;
  return cfg;
}

/// Trains torch's parameters: for TorchScript exports onyx's default set (every float
/// initializer that reaches the loss) must be exactly those; the dynamo exporter also stores
/// scalar constants (Pow's exponent 3, the tanh-GELU coefficients, the attention scale, the
/// -inf of a causal mask) as 0-d float initializers, which the default set would train, so
/// those files name the parameters.
void choose_parameters(TrainingConfig& cfg, const nlohmann::json& params, const std::string& file) {
  if (file != "model.onnx") cfg.trainable = params.at(file).get<std::vector<std::string>>();
}

void expect_torch_parameters(const TrainingSession& ts, const nlohmann::json& params,
                             const std::string& file) {
  std::vector<std::string> got = ts.parameter_names();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, params.at(file).get<std::vector<std::string>>()) << "trainable set of " << file;
}

struct Trajectory {
  std::string model, optimizer, file = "model.onnx";
};

void PrintTo(const Trajectory& t, std::ostream* os) { *os << t.model << "/" << t.file << "/" << t.optimizer; }

std::string trajectory_name(const testing::TestParamInfo<Trajectory>& p) {
  std::string f = p.param.file == "model.onnx" ? "" : "_" + p.param.file.substr(0, p.param.file.find('.'));
  return p.param.model + f + "_" + p.param.optimizer;
}

class TorchTrajectory : public testing::TestWithParam<Trajectory> {};

}  // namespace

TEST_P(TorchTrajectory, LossesMatchTorchAtEveryStep) {
  const Trajectory& p = GetParam();
  nlohmann::json ref = read_json(data_path(p.model, "losses.json"));
  TrainingConfig cfg = torch_config(p.optimizer, ref.at(p.optimizer).at("config"));
  choose_parameters(cfg, ref.at("params"), p.file);
  TrainingSession ts(data_path(p.model, p.file), cfg);
  expect_torch_parameters(ts, ref.at("params"), p.file);
  // The stacked batches of every input, then the labels.
  std::vector<std::pair<std::string, Tensor>> stacked;
  for (const auto& name : ts.batch_inputs())
    stacked.emplace_back(name, npy::load(data_path(p.model, name + ".npy")));
  const auto& losses = ref.at(p.optimizer).at("losses");
  const int64_t steps = ref.at("steps"), nb = ref.at("num_batches");
  ASSERT_EQ(static_cast<int64_t>(losses.size()), steps);
  double worst = 0;
  int64_t worst_step = 0;
  for (int64_t s = 0; s < steps; ++s) {
    NamedTensors batch;
    for (const auto& [name, t] : stacked) batch[name] = slice(t, s % nb);
    const double got = ts.train_step(batch), want = losses[s];
    const double rel = std::abs(got - want) / std::abs(want);
    if (rel > worst) worst = rel, worst_step = s;
    EXPECT_LE(rel, 1e-4) << "step " << s << ": onyx " << got << ", torch " << want;
  }
  RecordProperty("max_rel_diff", std::to_string(worst));
  std::cout << p.model << " (" << p.file << ") " << p.optimizer << ": max relative loss difference " << worst
            << " at step " << worst_step << " over " << steps << " steps\n";
}

INSTANTIATE_TEST_SUITE_P(Torch, TorchTrajectory,
                         testing::Values(Trajectory{"mlp", "sgd"}, Trajectory{"mlp", "adamw"},
                                         Trajectory{"cnn_bn", "sgd"}, Trajectory{"cnn_bn", "adamw"},
                                         Trajectory{"gpt2", "sgd"}, Trajectory{"gpt2", "adamw"},
                                         Trajectory{"gpt2", "sgd", "model_dynamo.onnx"},
                                         Trajectory{"gpt2", "adamw", "model_dynamo.onnx"},
                                         // torch.split as SplitToSequence + SequenceAt.
                                         Trajectory{"gpt2", "sgd", "model_dynamo_unoptimized.onnx"},
                                         Trajectory{"gpt2", "adamw", "model_dynamo_unoptimized.onnx"}),
                         trajectory_name);

class TorchShapes : public testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TorchShapes, BuildsMatchesTorchForwardAndTrains) {
  const auto& [model, file] = GetParam();
  nlohmann::json meta = read_json(data_path(model, "meta.json"));
  TrainingConfig cfg;
  cfg.loss.kind = "softmax_cross_entropy";
  cfg.loss.class_axis = -1;
  const nlohmann::json& sgd = meta.at("sgd").at("config");
  cfg.optimizer = {.name = "sgd",
                   .lr = sgd.at("lr"),
                   .momentum = sgd.at("momentum"),
                   .weight_decay = sgd.at("weight_decay")};
  cfg.threads = 1;
  choose_parameters(cfg, meta.at("params"), file);
  TrainingSession ts(data_path(model, file), cfg);
  expect_torch_parameters(ts, meta.at("params"), file);
  NamedTensors inputs, batch;
  for (const auto& name : meta.at("inputs").get<std::vector<std::string>>())
    inputs[name] = npy::load(data_path(model, name + ".npy"));
  batch = inputs;
  batch["labels"] = npy::load(data_path(model, "labels.npy"));

  Tensor want = npy::load(data_path(model, "output.npy"));
  Tensor got = ts.predict(inputs).at("logits");
  ASSERT_EQ(got.shape(), want.shape());
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.data<float>()[i];
    worst = std::max(worst, std::abs(got.data<float>()[i] - w) / std::max(1.0, std::abs(w)));
  }
  EXPECT_LE(worst, 1e-4) << "forward output differs from torch's";

  // 5 plain SGD steps on the batch: torch's losses, and lower at the end than at the start.
  const auto& want_losses = meta.at("sgd").at("losses");
  std::vector<double> losses;
  for (size_t s = 0; s < want_losses.size(); ++s) {
    losses.push_back(ts.train_step(batch));
    const double w = want_losses[s];
    EXPECT_LE(std::abs(losses.back() - w), 1e-4 * w)
        << "step " << s << ": onyx " << losses.back() << ", torch " << w;
  }
  EXPECT_LT(losses.back(), losses.front());
  std::cout << model << " (" << file << "): forward max difference " << worst << ", loss " << losses.front()
            << " -> " << losses.back() << " (torch " << want_losses.front() << " -> " << want_losses.back()
            << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Torch, TorchShapes,
                         testing::Combine(testing::Values("encoder", "decoder", "mha", "bert_block",
                                                          "llama_block"),
                                          testing::Values("model.onnx", "model_dynamo.onnx")),
                         [](const testing::TestParamInfo<std::tuple<std::string, std::string>>& p) {
                           return std::get<0>(p.param) +
                                  (std::get<1>(p.param) == "model.onnx" ? "" : "_dynamo");
                         });

}  // namespace onyx::test
