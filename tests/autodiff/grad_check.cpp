#include "grad_check.h"

#include <cmath>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace onyx::test {

namespace {

Tensor make_tensor(const GradInput& in, std::mt19937_64& rng) {
  std::vector<double> v = in.values;
  if (v.empty()) {
    std::uniform_real_distribution<double> u(in.lo, in.hi);
    v.resize(static_cast<size_t>(shape_numel(in.shape)));
    for (double& x : v) x = u(rng);
  }
  ONYX_CHECK(static_cast<int64_t>(v.size()) == shape_numel(in.shape), "[grad_check] input '{}' has {} values "
             "for shape {}", in.name, v.size(), shape_str(in.shape));
  auto conv = [&]<typename T>() {
    std::vector<T> c;
    for (double x : v) c.push_back(static_cast<T>(x));
    return Tensor::from_vector<T>(in.shape, c);
  };
  switch (in.dtype) {
    case DataType::Double: return conv.operator()<double>();
    case DataType::Float: return conv.operator()<float>();
    case DataType::Int64: return conv.operator()<int64_t>();
    case DataType::Int32: return conv.operator()<int32_t>();
    case DataType::Bool: return conv.operator()<bool>();
    default: ONYX_THROW("[grad_check] unsupported input dtype {}", dtype_name(in.dtype));
  }
}

std::unique_ptr<Model> new_model(const GradCase& gc) {
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", gc.opset});
  for (const auto& [domain, version] : gc.domains) m->opsets.push_back({domain, version});
  m->graph = std::make_unique<Graph>("grad_check");
  return m;
}

/// The forward model: inputs as initializers, the op (or the custom graph), its outputs.
std::unique_ptr<Model> forward_model(const GradCase& gc, std::mt19937_64& rng) {
  auto m = new_model(gc);
  Graph& g = *m->graph;
  std::vector<Value*> ins;
  for (const auto& in : gc.inputs)
    ins.push_back(in.omitted ? nullptr : g.add_initializer(in.name, make_tensor(in, rng)));
  std::vector<Value*> outs;
  if (gc.build) {
    outs = gc.build(g);
  } else {
    for (int i = 0; i < gc.outputs; ++i) outs.push_back(g.get_or_add_value(fmt::format("y{}", i)));
    Node* n = g.add_node(gc.op, ins, outs, "", gc.op + "_0");
    for (const auto& a : gc.attrs) n->attrs[a.name] = a;
  }
  std::vector<int> pick = gc.loss_outputs.empty() ? std::vector<int>{0} : gc.loss_outputs;
  for (int k : pick) g.outputs.push_back(outs.at(k));
  return m;
}

/// Appends L = sum_k ReduceSum(out_k * R_k) as the only output "L".
void add_projection(Model& m, const std::vector<Shape>& shapes, std::mt19937_64& rng) {
  Graph& g = *m.graph;
  std::vector<Value*> terms;
  std::uniform_real_distribution<double> u(-1, 1);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    std::vector<double> r(static_cast<size_t>(shape_numel(shapes[k])));
    for (double& x : r) x = u(rng);
    Value* R = g.add_initializer(fmt::format("R{}", k), Tensor::from_vector<double>(shapes[k], r));
    Value* prod = g.get_or_add_value(fmt::format("proj{}", k));
    g.add_node("Mul", {g.outputs[k], R}, {prod}, "", prod->name);
    Value* s = g.get_or_add_value(fmt::format("proj_sum{}", k));
    Node* red = g.add_node("ReduceSum", {prod}, {s}, "", s->name);
    red->attrs["keepdims"] = Attribute::of_int("keepdims", 0);
    terms.push_back(s);
  }
  Value* L = g.get_or_add_value("L");
  g.add_node("Sum", terms, {L}, "", "L");
  g.outputs = {L};
}

}  // namespace

void check_gradient(const GradCase& gc) {
  std::mt19937_64 rng(gc.seed);
  auto fwd = forward_model(gc, rng);
  SessionOptions so;
  so.intra_op_threads = 1;
  so.opt_level = OptLevel::None;
  RunOptions ro;
  ro.seed = gc.run_seed;
  std::vector<Shape> shapes;
  {
    auto probe = forward_model(gc, *std::make_unique<std::mt19937_64>(gc.seed));
    Session s(std::move(probe), so);
    auto outs = s.run({}, {}, ro);
    for (const auto& o : fwd->graph->outputs) {
      const Tensor& t = outs.at(o->name);
      ASSERT_EQ(t.dtype(), DataType::Double) << "output " << o->name << " of " << gc.op;
      shapes.push_back(t.shape());
    }
  }
  add_projection(*fwd, shapes, rng);
  std::vector<std::string> params;
  NamedTensors base;
  for (const auto& in : gc.inputs)
    if (in.param && !in.omitted) {
      params.push_back(in.name);
      base[in.name] = fwd->graph->initializers.at(in.name);
    }
  ASSERT_FALSE(params.empty());
  autodiff::LossSpec spec;
  spec.kind = "output";
  spec.output = "L";
  auto tg = autodiff::build_training_graph(*fwd, spec, params);
  Session train(std::move(tg.model), so);
  auto got = train.run(base, {}, ro);
  // Central differences of the model as given (not its training-time rewrites: old-opset
  // upgrades, defused com.microsoft ops), with the parameters fed.
  auto eval = clone_model(*fwd);
  for (const auto& p : params) eval->graph->inputs.push_back(eval->graph->find_value(p));
  Session ev(std::move(eval), so);
  for (size_t p = 0; p < params.size(); ++p) {
    const Tensor& x0 = base.at(params[p]);
    const Tensor& grad = got.at(tg.grads[p]);
    ASSERT_EQ(grad.shape(), x0.shape()) << "gradient of " << params[p];
    auto analytic = grad.to_double_vector();
    for (int64_t i = 0; i < x0.numel(); ++i) {
      NamedTensors feeds = base;
      double numeric = 0;
      for (double sign : {1.0, -1.0}) {
        Tensor x = x0.clone();
        x.data<double>()[i] += sign * gc.eps;
        feeds[params[p]] = x;
        double L = ev.run(feeds, {"L"}, ro).at("L").to_double_vector()[0];
        numeric += sign * L;
      }
      numeric /= 2 * gc.eps;
      EXPECT_NEAR(analytic[i], numeric, gc.atol + gc.rtol * std::abs(numeric))
          << gc.op << ": d/d" << params[p] << "[" << i << "]";
    }
  }
}

GradCase in_float32(GradCase gc) {
  auto to = [](DataType t) { return Attribute::of_int("to", static_cast<int64_t>(t)); };
  std::vector<std::pair<std::string, bool>> ins;  // name ("" omitted), cast to float
  for (const auto& in : gc.inputs)
    ins.emplace_back(in.omitted ? "" : in.name, !in.omitted && in.dtype == DataType::Double);
  gc.build = [ins, to, op = gc.op, attrs = gc.attrs, n = gc.outputs](Graph& g) {
    std::vector<Value*> args;
    for (const auto& [name, cast] : ins) {
      Value* v = name.empty() ? nullptr : g.find_value(name);
      args.push_back(cast ? add(g, "Cast", {v}, {to(DataType::Float)}) : v);
    }
    std::vector<Value*> outs;
    for (int i = 0; i < n; ++i) outs.push_back(g.add_unique_value(op + "_f32"));
    Node* node = g.add_node(op, args, outs, "", op + "_f32");
    for (const auto& a : attrs) node->attrs[a.name] = a;
    std::vector<Value*> res;
    for (Value* o : outs) res.push_back(add(g, "Cast", {o}, {to(DataType::Double)}));
    return res;
  };
  gc.eps = 1e-3, gc.rtol = 2e-2, gc.atol = 2e-3;
  return gc;
}

}  // namespace onyx::test
