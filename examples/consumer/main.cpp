// Uses onyx from outside its source tree, through the installed <onyx/onyx.h>.
//   consumer              builds y = Relu(x W + b) in memory, runs it, checks the result
//   consumer MODEL.onnx   loads MODEL, feeds float input number i the ramp i, i+1, i+2, ...,
//                         prints the outputs and what each float output's elements add up to
#include <onyx/onyx.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>
#include <vector>

namespace {

// 1. A model built in code: x [2, 3] -> MatMul W [3, 2] -> Add b [2] -> Relu -> y [2, 2].
std::unique_ptr<onyx::Model> tiny_model() {
  auto model = std::make_unique<onyx::Model>();
  model->ir_version = 10;
  model->opsets = {{"", 21}};
  model->graph = std::make_unique<onyx::Graph>("tiny");
  onyx::Graph& g = *model->graph;
  onyx::Value* x = g.get_or_add_value("x");
  x->type = onyx::ValueType::tensor(onyx::DataType::Float,
                                    onyx::SymShape{onyx::Dim::fixed(2), onyx::Dim::fixed(3)});
  g.inputs.push_back(x);
  onyx::Value* w = g.add_initializer(
      "W", onyx::Tensor::from_vector<float>({3, 2}, {1.f, -1.f, 2.f, 0.f, -1.f, 1.f}));
  onyx::Value* b = g.add_initializer("b", onyx::Tensor::from_vector<float>({2}, {0.5f, -1.f}));
  onyx::Value* xw = g.get_or_add_value("xw");
  onyx::Value* z = g.get_or_add_value("z");
  onyx::Value* y = g.get_or_add_value("y");
  g.add_node("MatMul", {x, w}, {xw}, "", "matmul");
  g.add_node("Add", {xw, b}, {z}, "", "add");
  g.add_node("Relu", {z}, {y}, "", "relu");
  g.outputs.push_back(y);
  return model;
}

int run_tiny_model() {
  onyx::Session session(tiny_model(), {.intra_op_threads = 1});
  onyx::Tensor x = onyx::Tensor::from_vector<float>({2, 3}, {1.f, 2.f, 3.f, -1.f, 0.f, 2.f});
  onyx::Tensor y = session.run({{"x", x}}).at("y");
  std::cout << "tiny model: y = " << y.str() << "\n";
  // x W + b = [[2.5, 1], [-2.5, 2]]; Relu clips the negative entry.
  const std::vector<float> expected = {2.5f, 1.f, 0.f, 2.f};
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::fabs(y.data<float>()[i] - expected[i]) > 1e-6f) {
      std::cerr << "mismatch at " << i << ": " << y.data<float>()[i] << " != " << expected[i]
                << "\n";
      return 1;
    }
  std::cout << "tiny model: ok\n";
  return 0;
}

// 2. A model from a file, run on ramp inputs (symbolic dimensions become 1).
int run_model_file(const char* path) {
  onyx::Session session(path, {.intra_op_threads = 1});
  onyx::NamedTensors feeds;
  int index = 0;
  for (const auto& in : session.inputs()) {
    onyx::Shape shape;
    for (const auto& d : in.type.shape.value_or(onyx::SymShape{}))
      shape.push_back(d.is_fixed() ? d.value : 1);
    onyx::Tensor t = onyx::Tensor::zeros(in.type.elem, shape);
    if (t.dtype() == onyx::DataType::Float)
      std::iota(t.data<float>(), t.data<float>() + t.numel(), float(index));
    std::cout << "input " << in.name << ": " << in.type.str() << "\n";
    feeds.emplace(in.name, t);
    ++index;
  }
  for (const auto& [name, t] : session.run(feeds)) {
    std::cout << "output " << name << ": " << t.str() << "\n";
    if (t.dtype() == onyx::DataType::Float)
      std::cout << "elements of " << name << " add up to "
                << std::accumulate(t.data<float>(), t.data<float>() + t.numel(), 0.0) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return argc > 1 ? run_model_file(argv[1]) : run_tiny_model();
  } catch (const onyx::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
