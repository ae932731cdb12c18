// onyx gradcheck: can this model be trained, and are its gradients right? First every node
// on a differentiable path without a gradient rule (before anything runs), then the whole
// model's gradients against finite differences in float64 (training/gradient_check.h).
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "graph/specialize.h"
#include "launcher/commands.h"
#include "launcher/feeds.h"
#include "training/gradient_check.h"

namespace onyx::cli {
namespace {

struct GradcheckOptions {
  std::string model;
  std::vector<std::string> inputs, dims;
  bool ops_only = false;
  int elements = 0, directions = 1, threads = 1;
  int64_t batch = 0;
  double eps = 1e-6, tolerance = 1e-4;
  uint64_t seed = 1;
};

int gradcheck(const GradcheckOptions& o) {
  auto model = load_model(o.model);
  auto missing = autodiff::missing_gradients(*model);
  if (!missing.empty()) {
    fmt::print("gradient rules: {} node(s) on the path from the parameters to the outputs "
               "cannot be differentiated:\n", missing.size());
    for (const auto& m : missing)
      fmt::print("  {} ({}{}): {}\n", m.node, m.domain.empty() ? "" : m.domain + ".", m.op_type,
                 m.why);
    fmt::print("gradcheck: FAIL: training this model stops at '{}' ({})\n", missing[0].node,
               missing[0].op_type);
    return 1;
  }
  fmt::print("gradient rules: every node on the path from the parameters to the outputs has "
             "one\n");
  if (o.ops_only) return 0;

  const auto t0 = std::chrono::steady_clock::now();
  const std::map<std::string, int64_t> dims = parse_dims(o.dims);
  if (o.batch > 0) {
    // Checked on a smaller batch than the model declares: specialise every input's dim 0.
    specialize_input_shapes(*model, input_shapes_with_batch(*model->graph, o.batch, dims),
                            /*resize_fixed=*/true);
    fmt::print("checking on a batch of {}\n", o.batch);
  }
  SessionOptions so;
  so.intra_op_threads = o.threads;
  so.opt_level = OptLevel::None;
  Session probe(clone_model(*model), so);
  NamedValues values = make_feeds(probe, o.inputs, /*random=*/true, dims, 0, o.seed);
  NamedTensors feeds;
  for (auto& [name, v] : values) {
    ONYX_CHECK(v.is_tensor(), "[gradcheck] input '{}' is not a tensor; gradcheck feeds tensors",
               name);
    feeds[name] = v.tensor;
  }
  GradCheckOptions go{.elements_per_param = o.elements, .directions = o.directions, .eps = o.eps,
                      .tolerance = o.tolerance, .seed = o.seed, .threads = o.threads};
  GradCheckReport r = check_model_gradients(*model, feeds, go);
  size_t w = 9;
  for (const auto& p : r.params) w = std::max(w, p.name.size());
  fmt::print("{:<{}}  {:<16}  {:>10}  {:>8}  {:>10}  {:>10}\n", "parameter", w, "shape",
             "directions", "elements", "max |a-n|", "rel error");
  int checked = 0, directions = 0;
  for (const auto& p : r.params) {
    fmt::print("{:<{}}  {:<16}  {:>10}  {:>8}  {:>10.2e}  {:>10.2e}{}\n", p.name, w,
               shape_str(p.shape), p.directions, p.checked, p.max_abs_error, p.relative_error,
               p.relative_error > r.tolerance ? "  FAIL" : "");
    checked += p.checked;
    directions += p.directions;
  }
  const ParamCheck* worst = r.worst();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("gradcheck: {}: {} parameters, {} directions, {} elements, worst relative error "
             "{:.2e} ('{}'), tolerance {:.0e}, {:.1f} s\n",
             r.passed() ? "PASS" : "FAIL", r.params.size(), directions, checked,
             worst ? worst->relative_error : 0.0, worst ? worst->name : "-", r.tolerance, seconds);
  return r.passed() ? 0 : 1;
}

}  // namespace

Command add_gradcheck_command(CLI::App& parent, const CommonOptions&) {
  auto o = std::make_shared<GradcheckOptions>();
  CLI::App* app = parent.add_subcommand(
      "gradcheck", "Check that a model can be trained: gradient rules, then float64 finite "
                   "differences of every parameter's gradient");
  app->add_option("model", o->model, "ONNX model")->required()->check(CLI::ExistingFile);
  app->add_flag("--ops", o->ops_only, "only list the nodes without a gradient rule");
  app->add_option("--input", o->inputs,
                  "NAME=FILE.npy (else random: floats in [-1, 1), integers in [0, 4))");
  app->add_option("--dim", o->dims, "NAME=N: size of a symbolic dim (default 1)");
  app->add_option("--batch", o->batch,
                  "N: check on N samples: dim 0 of every input becomes N, also where the model "
                  "fixes it (a smaller batch checks the same gradients faster)")
      ->check(CLI::PositiveNumber);
  app->add_option("--directions", o->directions,
                  "random directions per parameter (each checks every element at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--elements", o->elements,
                  "sampled elements per parameter, each checked on its own (localises an error)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--eps", o->eps,
                  "finite-difference step: each element moves by EPS * max(1, |x|)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--tolerance", o->tolerance, "largest relative error that passes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--seed", o->seed, "seed of the inputs, projection and sampled elements")
      ->capture_default_str();
  app->add_option("--threads", o->threads,
                  "intra-op threads (0: one per core); small models check fastest on 1")
      ->capture_default_str();
  return {app, [o] { return gradcheck(*o); }};
}

}  // namespace onyx::cli
