// Model bytes -> training graph (loss + backward from the gradient rules, autocast when the
// input asks for bf16 or fp16) -> two optimizer steps. Seeds: the conformance corpus's models,
// like the model target. Most of those have no initializers, so the harness turns every small
// float input into a trainable initializer holding random values: every op with a gradient
// rule then has its backward built and run on fuzzed graphs, shapes and attributes.
// ONYX_FUZZ_VERBOSE=1 prints each input's outcome ("trained" or the error), to see what the
// seeds reach: build-fuzz/tests/fuzz/fuzz_train FILES...
#include <chrono>
#include <cstdint>

#include "fuzz_common.h"
#include "graph/onnx_io.h"
#include "inference/session.h"
#include "launcher/feeds.h"
#include "training/training_session.h"

namespace {

// Parameters and feeds the harness makes up; larger ones are its own cost, not a finding.
constexpr int64_t kMaxElements = int64_t{1} << 16;

// The element count of `v`'s declared shape with symbolic dims as 2, or -1 when it has no
// shape or exceeds kMaxElements.
int64_t small_numel(const onyx::Value& v) {
  if (!v.type.shape) return -1;
  int64_t n = 1;
  for (const onyx::Dim& d : *v.type.shape) {
    int64_t size = d.is_fixed() ? d.value : 2;
    if (size < 0 || (size > 0 && n > kMaxElements / size)) return -1;
    n *= size;
  }
  return n;
}

onyx::Shape concrete(const onyx::Value& v) {
  onyx::Shape s;
  for (const onyx::Dim& d : *v.type.shape) s.push_back(d.is_fixed() ? d.value : 2);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t choice = data[size - 1];
  try {
    std::unique_ptr<onyx::Model> model = onyx::load_model_from_bytes(data, size);
    onyx::Graph& g = *model->graph;
    // Small float inputs become parameters (random values, fixed shapes).
    uint64_t seed = size;
    for (size_t i = 0; i < g.inputs.size();) {
      onyx::Value* in = g.inputs[i];
      const bool floating = in->type.kind == onyx::ValueType::Kind::Tensor &&
                            in->type.elem == onyx::DataType::Float;
      if (floating && small_numel(*in) >= 0) {
        g.add_initializer(in->name, onyx::cli::random_tensor(onyx::DataType::Float, concrete(*in), ++seed));
        g.inputs.erase(g.inputs.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (g.outputs.empty()) return 0;

    // The forward outputs' shapes (for the labels) come from one inference run.
    onyx::SessionOptions options;
    options.intra_op_threads = 1;
    options.log_level = "off";
    onyx::Session forward(onyx::clone_model(*model), options);
    for (const onyx::IoInfo& in : forward.inputs())
      if (!in.type.shape || in.type.kind != onyx::ValueType::Kind::Tensor) return 0;
    onyx::NamedValues values = onyx::cli::make_feeds(forward, {}, /*random=*/true, {}, /*batch=*/2, seed);
    onyx::NamedTensors feeds;
    for (auto& [name, value] : values) {
      if (!value.is_tensor() || value.tensor.numel() > kMaxElements) return 0;
      feeds[name] = value.tensor;
    }
    const std::string& out_name = forward.outputs().front().name;
    // A forward that never finishes (an endless Loop) is cancelled, not reported as a hang.
    onyx::RunOptions ro;
    ro.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    onyx::NamedTensors outs = forward.run(feeds, {out_name}, ro);
    const onyx::Tensor& out = outs.at(out_name);
    if (out.dtype() != onyx::DataType::Float) return 0;

    onyx::TrainingConfig config;
    config.threads = 1;
    config.loss.kind = "mse";
    config.loss.output = out_name;
    config.optimizer.name = (choice & 1) ? "adamw" : "sgd";
    config.precision = choice % 3 == 1 ? onyx::Precision::BFloat16
                       : choice % 3 == 2 ? onyx::Precision::Float16
                                         : onyx::Precision::Float32;
    onyx::TrainingSession training(std::move(model), config);
    feeds[config.loss.labels] = onyx::cli::random_tensor(onyx::DataType::Float, out.shape(), ++seed);
    training.train_step(feeds);
    training.train_step(feeds);
    if (std::getenv("ONYX_FUZZ_VERBOSE")) std::fprintf(stderr, "trained\n");
  } catch (const onyx::Error& e) {
    if (std::getenv("ONYX_FUZZ_VERBOSE")) std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 0;
}
