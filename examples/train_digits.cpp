// Trains a small classifier to read handwritten digits with onyx::TrainingSession, exports it,
// and checks the exported model with onyx::Session: the whole training workflow in one program.
//   train_digits MODEL.onnx [digits.csv.gz] [trained.onnx] [epochs] [fp32|bf16|fp16]
// MODEL.onnx comes from tools/gen_train_models.py: digits_mlp.onnx (x [N, 64]) or
// digits_cnn.onnx (x [N, 1, 8, 8]), both -> logits [N, 10].
// Exits 1 when the test accuracy (in the training session and of the exported model) is below 97%.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <numeric>

#include "digits.h"
#include "inference/session.h"
#include "training/training_session.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 6) {
    std::cerr << "usage: train_digits MODEL.onnx [digits.csv.gz] [trained.onnx] [epochs] "
                 "[fp32|bf16|fp16]\n";
    return 2;
  }
  const std::string exported = argc > 3 ? argv[3] : "digits.trained.onnx";
  try {
    // 1. Read the 1,797 images and hold every fifth one out: 1,437 to train on, 360 to test.
    auto [train, test] = digits::split(digits::read(argc > 2 ? argv[2] : digits::kDefaultCsv));

    // 2. Describe the training: softmax cross-entropy between the model's output and int64
    //    labels fed as "labels", AdamW, and a cosine decay of the rate after a short warm-up.
    const int epochs = argc > 4 ? std::max(1, std::atoi(argv[4])) : 40;
    const size_t batch = 32;
    const int64_t steps = epochs * static_cast<int64_t>((train.size() + batch - 1) / batch);
    onyx::TrainingConfig config;
    config.loss.kind = "softmax_cross_entropy";
    config.optimizer = {.name = "adamw", .lr = 3e-3, .weight_decay = 1e-4};
    config.schedule = {.kind = "cosine", .warmup_steps = 40, .total_steps = steps};
    config.seed = 1;     // Dropout masks (the MLP has Dropout)
    config.threads = 2;  // intra-op threads
    // Mixed precision: matrix products in bf16/fp16, weights and optimizer in float32.
    if (argc > 5) config.precision = onyx::parse_precision(argv[5]);

    // 3. Build the session: it loads the model, adds the loss and the backward graph, and
    //    compiles training and evaluation graphs on the inference engine.
    onyx::TrainingSession session(argv[1], config);
    std::cout << "training " << session.parameter_names().size() << " parameters; batch inputs:";
    for (const auto& name : session.batch_inputs()) std::cout << " " << name;
    std::cout << "\n";
    // The model's declared input says how a batch of images is laid out: flat [N, 64] (MLP)
    // or one 8x8 plane each [N, 1, 8, 8] (CNN).
    const onyx::Value* x = session.training_model().graph->find_value("x");
    const bool planes = x && x->type.shape && x->type.shape->size() == 4;
    auto batch_shape = [planes](size_t n) {
      auto rows = static_cast<int64_t>(n);
      return planes ? onyx::Shape{rows, 1, 8, 8} : onyx::Shape{rows, 64};
    };

    // 4. Train: every epoch visits the training images once, in a new seeded order.
    std::mt19937_64 rng(config.seed);
    auto start = std::chrono::steady_clock::now();
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      std::vector<size_t> order = digits::shuffled(train.size(), rng);
      double loss_sum = 0;
      int batches = 0;
      for (size_t begin = 0; begin < train.size(); begin += batch, ++batches) {
        size_t end = std::min(begin + batch, train.size());
        onyx::Shape shape = batch_shape(end - begin);
        loss_sum += session.train_step({{"x", digits::images(train, order, begin, end, shape)},
                                        {"labels", digits::labels(train, order, begin, end)}});
      }
      if (epoch % 5 == 0 || epoch == 1)
        std::cout << "epoch " << epoch << "  mean loss " << loss_sum / batches << "  next lr "
                  << session.learning_rate() << "\n";
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "trained " << session.step() << " steps in " << seconds << " s\n";

    // 5. Evaluate on the held-out images; predict() runs in inference mode (Dropout off).
    std::vector<size_t> all(test.size());
    std::iota(all.begin(), all.end(), size_t{0});
    onyx::Tensor x_test = digits::images(test, all, 0, test.size(), batch_shape(test.size()));
    double accuracy = digits::accuracy(session.predict({{"x", x_test}}).at("logits"), test, all, 0);
    std::cout << "test accuracy (training session): " << 100 * accuracy << "%\n";

    // 6. Export: the forward model with the trained weights, a plain ONNX file.
    session.export_inference_model(exported);

    // 7. Reload the export with the inference engine and measure again: the same weights,
    //    so the same accuracy.
    onyx::Session inference(exported, {.intra_op_threads = 2});
    double reloaded = digits::accuracy(inference.run({{"x", x_test}}).at("logits"), test, all, 0);
    std::cout << "test accuracy (" << exported << " in onyx::Session): " << 100 * reloaded << "%\n";
    return accuracy >= 0.97 && reloaded >= 0.97 ? 0 : 1;
  } catch (const onyx::Error& e) {
    // Every bad input (files, model, batch) is an onyx::Error naming what was wrong.
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
