#include "training/gradient_check.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "graph/error.h"
#include "graph/float64.h"
#include "graph/onnx_io.h"
#include "inference/optimizer.h"

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
  ONYX_CHECK(o.directions >= 0 && o.elements_per_param >= 0 &&
                 o.directions + o.elements_per_param > 0,
             "[gradcheck] nothing to check: {} directions and {} elements per parameter",
             o.directions, o.elements_per_param);
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
  m.reset();
  // The finite differences need only the loss: the training graph's forward part (Dropout
  // and BatchNormalization in training mode, as in the analytic run), without the backward.
  auto loss_only = clone_model(*tg.model);
  Graph& lg = *loss_only->graph;
  lg.outputs = {lg.find_value(tg.loss)};
  eliminate_dead_code(lg);
  // A loaded copy lists parameters as overridable initializers only; feeds need them as inputs.
  for (const auto& p : tg.params)
    if (Value* v = lg.find_value(p);
        std::find(lg.inputs.begin(), lg.inputs.end(), v) == lg.inputs.end())
      lg.inputs.push_back(v);
  const Session loss_session(std::move(loss_only), so);
  NamedTensors base = Session(std::move(tg.model), so).run(f64, {}, ro);
  auto loss_at = [&](const std::string& param, const Tensor& value) {
    NamedTensors f = f64;
    f[param] = value;
    return loss_session.run(f, {tg.loss}, ro).at(tg.loss).to_double_vector()[0];
  };
  // Finite differences of L carry round-off of about 1e-16 |L| / h; below this floor a
  // gradient counts as zero (e.g. a bias that BatchNormalization cancels).
  const double floor = 1e-4 * std::max(1.0, std::abs(base.at(tg.loss).to_double_vector()[0]));
  GradCheckReport report;
  report.tolerance = o.tolerance;
  for (size_t p = 0; p < tg.params.size(); ++p) {
    const Tensor& x0 = initial[p];
    const double* x0v = x0.data<double>();
    const std::vector<double> analytic = base.at(tg.grads[p]).to_double_vector();
    ParamCheck pc{tg.params[p], x0.shape()};
    const int64_t n = x0.numel();
    if (o.directions > 0) {
      // Direction u_i = +-max(1, |x_i|) / sqrt(n): scaled per element as the element check's
      // step is (a -1e9 mask entry does not swamp the small ones), and of unit size overall, so
      // each pre-activation moves no further than one element's step moves it. A full +-h step
      // on every weight would push thousands of ReLU inputs across 0 in a ResNet and the
      // difference would no longer be the derivative (measured: 3e-2 off on ResNet-18).
      std::vector<double> scale(static_cast<size_t>(n));
      const double unit = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(n, 1)));
      double g_norm = 0;
      for (int64_t i = 0; i < n; ++i) {
        scale[i] = std::isfinite(x0v[i]) ? std::max(1.0, std::abs(x0v[i])) * unit : 0.0;
        g_norm += analytic[i] * analytic[i] * scale[i] * scale[i];
      }
      g_norm = std::sqrt(g_norm);
      const double h = o.eps;
      for (int k = 0; k < o.directions; ++k) {
        std::vector<double> d(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) d[i] = (rng() >> 63) ? scale[i] : -scale[i];
        double a = 0;
        for (int64_t i = 0; i < n; ++i) a += analytic[i] * d[i];
        Tensor plus = x0.clone(), minus = x0.clone();
        double* pp = plus.data<double>();
        double* pm = minus.data<double>();
        for (int64_t i = 0; i < n; ++i) pp[i] += h * d[i], pm[i] -= h * d[i];
        const double numeric =
            (loss_at(tg.params[p], plus) - loss_at(tg.params[p], minus)) / (2 * h);
        const double err = std::abs(a - numeric);
        pc.max_abs_error = std::max(pc.max_abs_error, err);
        pc.relative_error =
            std::max(pc.relative_error, err / std::max({floor, std::abs(numeric), g_norm}));
        ++pc.directions;
      }
    }
    std::vector<int64_t> picks;
    const int64_t k = std::min<int64_t>(n, o.elements_per_param);
    std::uniform_int_distribution<int64_t> any(0, std::max<int64_t>(0, n - 1));
    for (int64_t i = 0; i < k; ++i) picks.push_back(k == n ? i : any(rng));
    // Sampled elements are judged together, against the largest of their differences.
    double max_numeric = 0, max_err = 0;
    for (int64_t i : picks) {
      const double xi = x0v[i];
      const double h = o.eps * std::max(1.0, std::abs(xi));
      double numeric = 0;
      for (double sign : {1.0, -1.0}) {
        Tensor x = x0.clone();
        x.data<double>()[i] = xi + sign * h;
        numeric += sign * loss_at(tg.params[p], x);
      }
      numeric /= 2 * h;
      max_numeric = std::max(max_numeric, std::abs(numeric));
      max_err = std::max(max_err, std::abs(analytic[static_cast<size_t>(i)] - numeric));
      ++pc.checked;
    }
    pc.max_abs_error = std::max(pc.max_abs_error, max_err);
    pc.relative_error = std::max(pc.relative_error, max_err / std::max(floor, max_numeric));
    report.params.push_back(pc);
  }
  return report;
}

}  // namespace onyx
