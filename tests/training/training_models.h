// Small forward models for the training tests, built in code with seeded random weights.
#pragma once

#include <random>

#include "test_util.h"

namespace onyx::test {

inline Tensor random_tensor(const Shape& s, std::mt19937& rng, double scale = 0.5) {
  std::normal_distribution<float> n(0.f, static_cast<float>(scale));
  std::vector<float> v(static_cast<size_t>(shape_numel(s)));
  for (float& x : v) x = n(rng);
  return Tensor::from_vector<float>(s, v);
}

/// The MLP's input x[N, in] and seeded weights w1 [hidden, in], b1, w2 [classes, hidden], b2:
/// the same draws whichever way its layers are spelled.
inline void add_mlp_weights(ModelBuilder& b, int64_t in, int64_t hidden, int64_t classes,
                            uint32_t seed) {
  std::mt19937 rng(seed);
  b.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(in)});
  b.initializer("w1", random_tensor({hidden, in}, rng));
  b.initializer("b1", random_tensor({hidden}, rng, 0.1));
  b.initializer("w2", random_tensor({classes, hidden}, rng));
  b.initializer("b2", random_tensor({classes}, rng, 0.1));
}

/// x[N, in] -> Gemm -> Relu -> (Dropout) -> Gemm -> logits[N, classes].
inline std::unique_ptr<Model> mlp_model(int64_t in, int64_t hidden, int64_t classes, bool dropout = false,
                                        uint32_t seed = 7) {
  ModelBuilder b(17);
  add_mlp_weights(b, in, hidden, classes, seed);
  set_attrs(b.node("Gemm", {"x", "w1", "b1"}, {"h"}), {attr_int("transB", 1)});
  b.node("Relu", {"h"}, {"hr"});
  std::string last = "hr";
  if (dropout) {
    b.initializer("ratio", Tensor::scalar<float>(0.3f));
    b.node("Dropout", {"hr", "ratio"}, {"hd"});
    last = "hd";
  }
  set_attrs(b.node("Gemm", {last, "w2", "b2"}, {"logits"}), {attr_int("transB", 1)});
  b.output("logits");
  return b.build();
}

/// mlp_model's layers as torch.onnx writes nn.Linear on 3-D input: MatMul(x, Transpose(W)) + b.
inline std::unique_ptr<Model> transposed_mlp_model(int64_t in, int64_t hidden, int64_t classes) {
  ModelBuilder b(17);
  add_mlp_weights(b, in, hidden, classes, 7);
  b.node("Transpose", {"w1"}, {"w1t"}).attrs["perm"] = attr_ints("perm", {1, 0});
  b.node("Transpose", {"w2"}, {"w2t"}).attrs["perm"] = attr_ints("perm", {1, 0});
  b.node("MatMul", {"x", "w1t"}, {"xw"});
  b.node("Add", {"xw", "b1"}, {"h"});
  b.node("Relu", {"h"}, {"hr"});
  b.node("MatMul", {"hr", "w2t"}, {"hw"});
  b.node("Add", {"hw", "b2"}, {"logits"});
  b.output("logits");
  return b.build();
}

/// y = x W^T + b (one Gemm), for closed-form checks.
inline std::unique_ptr<Model> linear_model(int64_t in, int64_t out, uint32_t seed = 3) {
  std::mt19937 rng(seed);
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("N"), Dim::fixed(in)});
  b.initializer("W", random_tensor({out, in}, rng));
  b.initializer("b", random_tensor({out}, rng, 0.1));
  set_attrs(b.node("Gemm", {"x", "W", "b"}, {"y"}), {attr_int("transB", 1)});
  b.output("y");
  return b.build();
}

/// A classification batch: x ~ N(0, 1), labels = argmax of a fixed random projection.
inline NamedTensors class_batch(int64_t n, int64_t in, int64_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::mt19937 proj_rng(99);
  Tensor proj = random_tensor({classes, in}, proj_rng, 1.0);
  Tensor x = random_tensor({n, in}, rng, 1.0);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float best = -1e30f;
    for (int64_t c = 0; c < classes; ++c) {
      float s = 0;
      for (int64_t j = 0; j < in; ++j) s += x.data<float>()[i * in + j] * proj.data<float>()[c * in + j];
      if (s > best) best = s, labels[static_cast<size_t>(i)] = c;
    }
  }
  return {{"x", x}, {"labels", Tensor::from_vector<int64_t>({n}, labels)}};
}

}  // namespace onyx::test
