// Trains a small character-level transformer language model with onyx::TrainingSession.
//
//   tools/gen_char_lm.py --out char_lm.onnx          # the model: 2 causal blocks, dim 64
//   train_char_lm char_lm.onnx [TEXT] [STEPS] [PRECISION]
//                                    # TEXT: /usr/share/common-licenses/GPL-3; PRECISION: fp32
//                                    # (default), or bf16/fp16 mixed precision
//
// The model reads T bytes and predicts, at every position, the byte that follows. Training
// samples random windows from the first 90% of the text; the last 10% is held out. The program
// prints the loss curve and exits 0 only when the held-out loss ends at least 15% below the
// text's unigram entropy (the loss of the best model that ignores context).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "training/training_session.h"

namespace {

// Mean cross-entropy (nats per char) of the model on consecutive held-out windows.
double held_out_loss(const onyx::TrainingSession& ts, const std::vector<int64_t>& text,
                     int64_t T) {
  const int64_t windows = std::min<int64_t>(64, (static_cast<int64_t>(text.size()) - 1) / T);
  std::vector<int64_t> tokens, labels;
  for (int64_t w = 0; w < windows; ++w) {
    tokens.insert(tokens.end(), text.begin() + w * T, text.begin() + (w + 1) * T);
    labels.insert(labels.end(), text.begin() + w * T + 1, text.begin() + (w + 1) * T + 1);
  }
  onyx::NamedTensors batch = {{"tokens", onyx::Tensor::from_vector<int64_t>({windows, T}, tokens)},
                              {"labels", onyx::Tensor::from_vector<int64_t>({windows, T}, labels)}};
  return ts.eval_step(batch).at("loss").to_double_vector()[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::cerr << "usage: train_char_lm MODEL.onnx [TEXT] [STEPS] [fp32|bf16|fp16]\n";
    return 2;
  }
  const std::string text_path = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
  const int steps = argc > 3 ? std::atoi(argv[3]) : 300;
  const int64_t batch = 32;
  try {
    if (steps <= 20)
      throw onyx::Error("[train_char_lm] expected STEPS above the 20 warm-up steps, found '" +
                        std::string(argv[3]) + "'");
    // 1. Configure training: softmax cross-entropy on the logits [B, V, T] against labels
    //    [B, T], AdamW with a short warm-up and cosine decay, gradients clipped at norm 1.
    onyx::TrainingConfig config;
    config.loss.kind = "softmax_cross_entropy";
    config.optimizer = {.name = "adamw", .lr = 3e-3, .weight_decay = 0.01};
    config.schedule = {.kind = "cosine", .warmup_steps = 20, .total_steps = steps,
                       .min_lr = 3e-4};
    config.clip_norm = 1.0;
    config.threads = 2;
    // Mixed precision: matrix products in bf16/fp16, weights and optimizer in float32.
    if (argc > 4) config.precision = onyx::parse_precision(argv[4]);

    // 2. Build the session: loads the forward model, appends the loss, derives the backward
    //    graph, compiles both and lays the parameters out in one flat buffer.
    onyx::TrainingSession ts(argv[1], config);
    const int64_t vocab = ts.parameter("tok_emb").shape()[0];
    const int64_t T = ts.parameter("pos_emb").shape()[0];

    // 3. Read the text as bytes; every byte must be a token id the model knows.
    std::ifstream file(text_path, std::ios::binary);
    if (!file) throw onyx::Error("[train_char_lm] cannot open text file '" + text_path + "'");
    const std::string bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    std::vector<int64_t> text;
    for (char c : bytes) text.push_back(static_cast<unsigned char>(c));
    for (int64_t c : text)
      if (c >= vocab)
        throw onyx::Error("[train_char_lm] expected bytes below the model's vocabulary of " +
                          std::to_string(vocab) + ", found byte " + std::to_string(c) + " in " +
                          text_path);
    if (static_cast<int64_t>(text.size()) < 20 * (T + 1))
      throw onyx::Error("[train_char_lm] expected a text of at least " +
                        std::to_string(20 * (T + 1)) + " bytes, found " +
                        std::to_string(text.size()));

    // 4. The baseline: unigram entropy H = -sum p(c) ln p(c) in nats per char.
    std::vector<double> count(static_cast<size_t>(vocab), 0.0);
    for (int64_t c : text) count[static_cast<size_t>(c)] += 1;
    double entropy = 0;
    for (double n : count)
      if (n > 0) entropy -= n / text.size() * std::log(n / text.size());

    // 5. Hold out the last 10% of the text for evaluation.
    const size_t split = text.size() * 9 / 10;
    const std::vector<int64_t> train(text.begin(), text.begin() + split);
    const std::vector<int64_t> held(text.begin() + split, text.end());
    std::printf("text: %s, %zu chars (%zu train, %zu held out); unigram entropy %.3f nats/char\n",
                text_path.c_str(), text.size(), train.size(), held.size(), entropy);
    std::printf("model: %s, context %lld, vocab %lld, %zu parameter tensors; "
                "%d AdamW steps of %lld windows, %s\n",
                argv[1], static_cast<long long>(T), static_cast<long long>(vocab),
                ts.parameter_names().size(), steps, static_cast<long long>(batch),
                onyx::precision_name(config.precision));
    std::printf("held-out loss before training: %.3f\n", held_out_loss(ts, held, T));

    // 6. Train: each step samples windows of T+1 chars; the labels are the inputs shifted by one.
    std::mt19937 rng(1234);
    std::uniform_int_distribution<size_t> start(0, train.size() - static_cast<size_t>(T) - 1);
    std::vector<int64_t> tokens(static_cast<size_t>(batch * T)), labels(tokens.size());
    double interval_loss = 0;
    for (int s = 1; s <= steps; ++s) {
      for (int64_t b = 0; b < batch; ++b) {
        size_t at = start(rng);
        std::copy_n(train.begin() + at, T, tokens.begin() + b * T);
        std::copy_n(train.begin() + at + 1, T, labels.begin() + b * T);
      }
      onyx::StepResult r = ts.train_step_detailed(
          {{"tokens", onyx::Tensor::from_vector<int64_t>({batch, T}, tokens)},
           {"labels", onyx::Tensor::from_vector<int64_t>({batch, T}, labels)}});
      interval_loss += r.loss;
      if (s % 25 == 0 || s == steps) {
        int n = s % 25 == 0 ? 25 : s % 25;
        std::printf("step %4d  train loss %.3f  lr %.2e  grad norm %.2f\n", s, interval_loss / n,
                    r.lr, r.grad_norm);
        interval_loss = 0;
      }
    }

    // 7. Evaluate on the held-out text and compare with the unigram entropy.
    const double eval = held_out_loss(ts, held, T);
    const bool learned = eval <= 0.85 * entropy;
    std::printf("held-out loss after training: %.3f nats/char; unigram entropy %.3f "
                "(%.0f%% lower)\n",
                eval, entropy, 100.0 * (1.0 - eval / entropy));

    // 8. Generate a few characters greedily from the trained model, a prompt padded with spaces.
    std::string prompt = "This License ";
    std::vector<int64_t> window(static_cast<size_t>(T), ' ');
    std::string out = prompt;
    for (int i = 0; i < 60; ++i) {
      std::vector<int64_t> ctx(window);
      const size_t n = std::min(out.size(), static_cast<size_t>(T));
      std::transform(out.end() - n, out.end(), ctx.end() - n, [](char c) { return int64_t(c); });
      // logits [1, V, T]: the prediction for the next char is the last position's column.
      const onyx::Tensor logits =
          ts.predict({{"tokens", onyx::Tensor::from_vector<int64_t>({1, T}, ctx)}}).at("logits");
      int64_t best = 0;
      for (int64_t v = 1; v < vocab; ++v)
        if (logits.data<float>()[v * T + T - 1] > logits.data<float>()[best * T + T - 1]) best = v;
      out.push_back(static_cast<char>(best));
    }
    std::printf("sample: \"%s\"\n", out.c_str());

    std::printf("%s: held-out loss must be <= 0.85 x unigram entropy = %.3f\n",
                learned ? "PASS" : "FAIL", 0.85 * entropy);
    return learned ? 0 : 1;
  } catch (const onyx::Error& e) {
    // Every bad input (model, text, batch) is an onyx::Error naming what was expected.
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
