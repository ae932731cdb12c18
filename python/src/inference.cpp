// onyx._onyx._Session: onyx::Session for python/onyx/inference.py, which gives it ONNX
// Runtime's InferenceSession interface. Feeds are viewed (DLPack), outputs come back as numpy
// views of onyx's buffers, and the GIL is released while the model compiles and runs.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "graph/onnx_io.h"
#include "inference/session.h"

namespace onyx::py {

using namespace nb::literals;

namespace {

/// ORT's NodeArg.shape: fixed dims as ints, symbolic ones as their names, unknown ones None;
/// None for the whole shape when not even the rank is known.
nb::object shape_list(const std::optional<SymShape>& shape) {
  if (!shape) return nb::none();
  nb::list dims;
  for (const Dim& d : *shape) {
    if (d.is_fixed()) dims.append(d.value);
    else if (!d.param.empty()) dims.append(d.param);
    else dims.append(nb::none());
  }
  return dims;
}

nb::list io_list(const std::vector<IoInfo>& infos) {
  nb::list out;
  for (const IoInfo& io : infos)
    out.append(nb::make_tuple(io.name, ort_type_string(io.type),
                              io.type.is_tensor() ? shape_list(io.type.shape) : nb::list()));
  return out;
}

nb::dict metadata_dict(const Session& s) {
  const ModelMetadata& md = s.metadata();
  nb::dict custom;
  for (const auto& [k, v] : md.custom) custom[nb::str(k.c_str())] = v;
  nb::dict d;
  d["producer_name"] = md.producer_name;
  d["producer_version"] = md.producer_version;
  d["graph_name"] = md.graph_name;
  d["graph_description"] = s.model().graph->doc_string;
  d["domain"] = md.domain;
  d["description"] = md.doc_string;
  d["version"] = md.model_version;
  d["custom_metadata_map"] = custom;
  return d;
}

/// Feeds by name, each viewed where it can be (copied only when it must be: lists, read-only
/// or strided arrays, strings), like ONNX Runtime accepts them.
NamedTensors feeds_from_dict(const nb::dict& feed) {
  NamedTensors feeds;
  for (auto [key, value] : feed) {
    if (!PyUnicode_Check(key.ptr()))
      throw nb::type_error("[python] input_feed keys must be input names (str)");
    std::string name = nb::cast<std::string>(key);
    feeds[name] = to_tensor(value, "input '" + name + "'", Convert::CopyIfNeeded);
  }
  return feeds;
}

nb::list run(const Session& s, std::optional<std::vector<std::string>> output_names,
             const nb::dict& input_feed, std::optional<uint64_t> seed) {
  NamedTensors feeds = feeds_from_dict(input_feed);
  std::vector<std::string> names = output_names.value_or(std::vector<std::string>{});
  RunOptions options;
  options.seed = seed;
  NamedTensors outputs;
  {
    nb::gil_scoped_release unlocked;
    outputs = s.run(feeds, names, options);
  }
  if (names.empty())
    for (const IoInfo& io : s.outputs()) names.push_back(io.name);
  nb::list result;
  for (const std::string& name : names) result.append(to_numpy(outputs.at(name)));
  return result;
}

}  // namespace

void bind_inference(nb::module_& m) {
  m.def("_available_providers", &available_providers,
        "The providers usable here, in priority order ('cuda' only with a CUDA device).");
  nb::class_<Session>(m, "_Session", "onyx::Session; onyx.InferenceSession wraps it.")
      .def(
          "__init__",
          [](Session* self, nb::handle model, int threads, const std::string& opt_level,
             bool profiling, const std::string& profile_path, const std::string& log_level,
             const std::string& precision, const std::vector<std::string>& providers, int device_id,
             bool winograd, bool prepack, bool flush_denormals, bool map_external_data) {
            std::unique_ptr<Model> loaded = load_model_arg(model, map_external_data);
            SessionOptions options;
            options.intra_op_threads = threads;
            options.opt_level = opt_level_from_name(opt_level);
            options.profiling = profiling;
            options.profile_path = profile_path;
            options.log_level = log_level;
            options.precision = parse_precision(precision);
            options.providers = providers;
            options.device_id = device_id;
            options.winograd_convolutions = winograd;
            options.prepack_weights = prepack;
            options.flush_denormals = flush_denormals;
            nb::gil_scoped_release unlocked;
            new (self) Session(std::move(loaded), options);
          },
          "model"_a, nb::kw_only(), "threads"_a = 0, "opt_level"_a = "all",
          "profiling"_a = false, "profile_path"_a = "onyx_profile.json", "log_level"_a = "warn",
          "precision"_a = "fp32", "providers"_a = std::vector<std::string>{"cpu"}, "device_id"_a = 0,
          "winograd"_a = true, "prepack"_a = true, "flush_denormals"_a = false,
          "map_external_data"_a = true)
      .def("run", &run, "output_names"_a.none(), "input_feed"_a, "seed"_a = nb::none(),
           "Runs the model; returns the outputs (all when output_names is None or empty) as "
           "numpy arrays viewing onyx's buffers.")
      .def("inputs", [](const Session& s) { return io_list(s.inputs()); },
           "[(name, ORT type string, shape)] of the declared inputs.")
      .def("outputs", [](const Session& s) { return io_list(s.outputs()); })
      .def("metadata", &metadata_dict)
      .def("end_profiling", &Session::end_profiling)
      .def("save_optimized_model",
           [](const Session& s, const std::string& path) { save_model(s.model(), path); },
           "path"_a, "Writes the optimized graph the session runs.");
}

}  // namespace onyx::py
