// Runs an ONNX model with onyx::Session: the smallest complete program.
//   run_model model.onnx
#include <iostream>

#include "inference/session.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: run_model MODEL.onnx\n";
    return 2;
  }
  try {
    // 1. Create a session: load, validate, optimize and compile the model once.
    onyx::Session session(argv[1], {.intra_op_threads = 2});

    // 2. Make one input per declared input; symbolic dims (e.g. batch) become 1 here.
    onyx::NamedTensors feeds;
    for (const auto& in : session.inputs()) {
      onyx::Shape shape;
      for (const auto& d : in.type.shape.value_or(onyx::SymShape{})) shape.push_back(d.is_fixed() ? d.value : 1);
      feeds.emplace(in.name, onyx::Tensor::zeros(in.type.elem, shape));
    }

    // 3. Run; the session is thread-safe, so many threads may call run() at once.
    onyx::RunStats stats;
    onyx::NamedTensors outputs = session.run(feeds, {}, &stats);

    // 4. Read the outputs.
    for (const auto& [name, tensor] : outputs) std::cout << name << ": " << tensor.str() << "\n";
    std::cout << "peak intermediate memory: " << stats.peak_bytes << " bytes\n";
  } catch (const onyx::Error& e) {
    // Every bad input (file, model, feed) is an onyx::Error with a message naming it.
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
