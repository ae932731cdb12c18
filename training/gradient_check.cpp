#include "training/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "graph/error.h"
#include "graph/float64.h"
#include "graph/onnx_io.h"

namespace onyx {

bool GradCheckReport::passed() const {
  return !params.empty() && std::all_of(params.begin(), params.end(), [&](const ParamCheck& p) {
           return p.relative_error <= tolerance;
         });
}

const ParamCheck* GradCheckReport::worst() const {
  const ParamCheck* w = nullptr;
  for (const ParamCheck& p : params)
    if (!w || p.relative_error > w->relative_error) w = &p;
  return w;
}

namespace {

Tensor as_double(const Tensor& t) {
  if (!is_float(t.dtype()) || t.dtype() == DataType::Double) return t;
  return Tensor::from_vector<double>(t.shape(), t.to_double_vector());
}

// Appends "gradcheck/L" = sum_k ReduceSum(out_k * R_k) over the float outputs and makes it
// the only output.
void add_projection(Model& m, const NamedTensors& outs, std::mt19937_64& rng) {
  Graph& g = *m.graph;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<Value*> terms;
  for (Value* o : g.outputs) {
    auto it = outs.find(o->name);
    if (it == outs.end() || it->second.dtype() != DataType::Double) continue;
    const Shape& shape = it->second.shape();
    std::vector<double> r(static_cast<size_t>(shape_numel(shape)));
    for (double& x : r) x = u(rng);
    // A Constant node, not an initializer: float initializers are trainable parameters.
    Value* R = g.add_unique_value("gradcheck/R");
    Attribute value;
    value.name = "value";
    value.type = Attribute::Type::Tensor;
    value.t = Tensor::from_vector<double>(shape, r);
    g.add_node("Constant", {}, {R}, "", R->name)->attrs["value"] = value;
    Value* prod = g.add_unique_value("gradcheck/prod");
    g.add_node("Mul", {o, R}, {prod}, "", prod->name);
    Value* s = g.add_unique_value("gradcheck/sum");
    g.add_node("ReduceSum", {prod}, {s}, "", s->name)->attrs["keepdims"] =
        Attribute::of_int("keepdims", 0);
    terms.push_back(s);
  }
  ONYX_CHECK(!terms.empty(), "[gradcheck] the model has no floating-point output to check");
  Value* L = g.get_or_add_value("gradcheck/L");
  g.add_node("Sum", terms, {L}, "", "gradcheck/L");
  g.outputs = {L};
}

}  // namespace

GradCheckReport check_model_gradients(const Model& forward, const NamedTensors& feeds,
                                      const GradCheckOptions& o) {
  auto missing = autodiff::missing_gradients(forward);
  ONYX_CHECK(missing.empty(), "[gradcheck] {} node(s) cannot be differentiated, the first is {} ({}): {}",
             missing.size(), missing[0].node, missing[0].op_type, missing[0].why);
  auto m = clone_model(forward);
  convert_to_float64(*m);
  NamedTensors f64;
  for (const auto& [name, t] : feeds) f64[name] = as_double(t);
  SessionOptions so;
  so.intra_op_threads = o.threads;
  so.opt_level = OptLevel::None;  // the graph autodiff differentiates, unfused
  RunOptions ro;
  ro.seed = o.seed;
  std::mt19937_64 rng(o.seed);
  {
    NamedTensors outs = Session(clone_model(*m), so).run(f64, {}, ro);
    add_projection(*m, outs, rng);
  }
  autodiff::TrainingGraph tg =
      autodiff::build_training_graph(*m, {.kind = "output", .output = "gradcheck/L"}, {});
  std::vector<Tensor> initial;
  for (const auto& p : tg.params) initial.push_back(m->graph->initializers.at(p));
  Session train(std::move(tg.model), so);
  NamedTensors base = train.run(f64, {}, ro);
  // Finite differences of L carry round-off of about 1e-16 |L| / h; below this floor a
  // gradient counts as zero (e.g. a bias that BatchNormalization cancels).
  const double floor = 1e-4 * std::max(1.0, std::abs(base.at(tg.loss).to_double_vector()[0]));
  GradCheckReport report;
  report.tolerance = o.tolerance;
  for (size_t p = 0; p < tg.params.size(); ++p) {
    const Tensor& x0 = initial[p];
    const std::vector<double> x0v = x0.to_double_vector();
    const std::vector<double> analytic = base.at(tg.grads[p]).to_double_vector();
    ParamCheck pc{tg.params[p], x0.shape()};
    const int64_t n = x0.numel();
    std::vector<int64_t> picks;
    const int64_t k = std::min<int64_t>(n, std::max(1, o.elements_per_param));
    std::uniform_int_distribution<int64_t> any(0, std::max<int64_t>(0, n - 1));
    for (int64_t i = 0; i < k; ++i) picks.push_back(k == n ? i : any(rng));
    double max_numeric = 0;
    for (int64_t i : picks) {
      const double xi = x0v[static_cast<size_t>(i)];
      const double h = o.eps * std::max(1.0, std::abs(xi));
      double numeric = 0;
      for (double sign : {1.0, -1.0}) {
        Tensor x = x0.clone();
        x.data<double>()[i] = xi + sign * h;
        NamedTensors f = f64;
        f[tg.params[p]] = x;
        numeric += sign * train.run(f, {tg.loss}, ro).at(tg.loss).to_double_vector()[0];
      }
      numeric /= 2 * h;
      max_numeric = std::max(max_numeric, std::abs(numeric));
      pc.max_abs_error = std::max(pc.max_abs_error, std::abs(analytic[static_cast<size_t>(i)] - numeric));
      ++pc.checked;
    }
    pc.relative_error = pc.max_abs_error / std::max(floor, max_numeric);
    report.params.push_back(pc);
  }
  return report;
}

}  // namespace onyx
