// The torch-exported models of tests/data/torch (tools/gen_torch_models.py: model.onnx, the
// batches as .npy, torch's losses and parameter names as JSON), read as torch tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/error.h"
#include "interop/torch_tensor.h"
#include "launcher/npy.h"

namespace onyx::torch::test {

inline std::string torch_data(const std::string& model, const std::string& file) {
  return std::string(ONYX_TORCH_TEST_DATA) + "/" + model + "/" + file;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open " + path);
  return nlohmann::json::parse(f);
}

/// <model>/<name>.npy as a torch tensor (over the memory onyx's npy reader allocated).
inline at::Tensor load_npy(const std::string& model, const std::string& name) {
  return to_torch(npy::load(torch_data(model, name + ".npy")));
}

}  // namespace onyx::torch::test
