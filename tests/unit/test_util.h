// Helpers for unit tests: build small models in code and run them through onyx::Session.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/onnx_io.h"
#include "inference/session.h"

namespace onyx::test {

/// Builds a model one node at a time:
///   ModelBuilder b(17);
///   b.input("x", DataType::Float, {2, 3});
///   b.node("Relu", {"x"}, {"y"});
///   b.output("y");
///   Session s = b.session();
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 21, std::string domain = "") : model_(std::make_unique<Model>()) {
    model_->ir_version = 10;
    model_->opsets.push_back({"", opset});
    if (!domain.empty()) model_->opsets.push_back({domain, 1});
    model_->graph = std::make_unique<Graph>("test");
  }
  /// Declares a graph input; `shape` empty with `unknown_shape` leaves the shape unknown.
  ModelBuilder& input(const std::string& name, DataType dt, const SymShape& shape) {
    Value* v = model_->graph->get_or_add_value(name);
    v->type = ValueType::tensor(dt, shape);
    model_->graph->inputs.push_back(v);
    return *this;
  }
  ModelBuilder& input(const std::string& name, DataType dt, const Shape& shape) {
    SymShape s;
    for (int64_t d : shape) s.push_back(Dim::fixed(d));
    return input(name, dt, s);
  }
  ModelBuilder& initializer(const std::string& name, const Tensor& t) {
    model_->graph->add_initializer(name, t);
    return *this;
  }
  /// Adds a node; an empty name in `ins` marks an omitted optional input.
  Node& node(const std::string& op, const std::vector<std::string>& ins,
             const std::vector<std::string>& outs, const std::string& domain = "") {
    Graph& g = *model_->graph;
    std::vector<Value*> vi, vo;
    for (const auto& n : ins) vi.push_back(n.empty() ? nullptr : g.get_or_add_value(n));
    for (const auto& n : outs) vo.push_back(n.empty() ? nullptr : g.get_or_add_value(n));
    return *g.add_node(op, vi, vo, domain, fmt::format("{}_{}", op, g.num_nodes()));
  }
  ModelBuilder& output(const std::string& name) {
    model_->graph->outputs.push_back(model_->graph->get_or_add_value(name));
    return *this;
  }
  /// Hands the model over (the builder is spent).
  std::unique_ptr<Model> build() { return std::move(model_); }
  Session session(SessionOptions opts = {}) {
    if (opts.intra_op_threads == 0) opts.intra_op_threads = 2;
    return Session(build(), opts);
  }

 private:
  std::unique_ptr<Model> model_;
};

inline Attribute attr_int(const std::string& n, int64_t v) { return Attribute::of_int(n, v); }
inline Attribute attr_float(const std::string& n, double v) { return Attribute::of_float(n, v); }
inline Attribute attr_ints(const std::string& n, std::vector<int64_t> v) {
  return Attribute::of_ints(n, std::move(v));
}
inline Attribute attr_string(const std::string& n, std::string v) {
  return Attribute::of_string(n, std::move(v));
}
inline Attribute attr_floats(const std::string& n, std::vector<float> v) {
  return Attribute::of_floats(n, std::move(v));
}
/// Sets attributes on a node: set_attrs(b.node(...), {attr_int("axis", 1)}).
inline void set_attrs(Node& n, std::vector<Attribute> attrs) {
  for (auto& a : attrs) n.attrs[a.name] = std::move(a);
}

/// Inputs in order; an undefined Tensor marks an omitted optional input.
using Named = std::vector<std::pair<std::string, Tensor>>;

/// Runs one `op` node on `inputs` (fed at run time); outputs are y0..y{outputs-1}. With
/// `symbolic`, input dims are unknown to the model, so kernels see shapes only at run time.
inline NamedTensors run_op(const std::string& op, const Named& inputs, std::vector<Attribute> attrs = {},
                           int outputs = 1, int64_t opset = 21, bool symbolic = false) {
  ModelBuilder b(opset);
  std::vector<std::string> ins, outs;
  NamedTensors feeds;
  for (const auto& [name, t] : inputs) {
    ins.push_back(t.defined() ? name : "");
    if (!t.defined()) continue;
    if (symbolic) {
      SymShape s;
      for (size_t i = 0; i < t.shape().size(); ++i) s.push_back(Dim::symbol(fmt::format("{}{}", name, i)));
      b.input(name, t.dtype(), s);
    } else {
      b.input(name, t.dtype(), t.shape());
    }
    feeds[name] = t;
  }
  for (int i = 0; i < outputs; ++i) outs.push_back(fmt::format("y{}", i));
  set_attrs(b.node(op, ins, outs), std::move(attrs));
  for (const auto& o : outs) b.output(o);
  return b.session().run(feeds);
}

/// A tensor of element type T from doubles: T_<int64_t>({2}, {1, 2}).
template <typename T = float>
Tensor T_(const Shape& shape, const std::vector<double>& v) {
  std::vector<T> c;
  for (double x : v) c.push_back(static_cast<T>(x));
  return Tensor::from_vector<T>(shape, c);
}

/// Runs `f`, expecting an onyx::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an onyx::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// A float32 tensor of N(0, scale^2) draws from a seeded generator.
inline Tensor random_normal(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector<float>(shape, v);
}

/// Tensor values as doubles, for EXPECT comparisons.
/// Normally distributed values (fixed seed, drawn in double) of `dt` (float, float16 or
/// double) and `shape`, scaled by `scale`.
inline Tensor randn(const Shape& shape, uint32_t seed, double scale = 1.0,
                    DataType dt = DataType::Float) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, scale);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  if (dt == DataType::Double) return T_<double>(shape, v);
  return dt == DataType::Float16 ? T_<float16>(shape, v) : T_<float>(shape, v);
}

/// Conv(x, w, b) -> name: constant [m, c, k, k] weights (He-scaled, so activations stay O(1)
/// through a chain), pads k / 2.
inline void add_conv(ModelBuilder& b, const std::string& x, const std::string& name, int64_t c,
                     int64_t m, int64_t k, uint32_t seed, int64_t stride = 1, int64_t dilation = 1) {
  b.initializer(name + "_w", randn({m, c, k, k}, seed, std::sqrt(2.0 / double(c * k * k))));
  b.initializer(name + "_b", randn({m}, seed + 1, 0.1));
  const int64_t pad = k / 2 * dilation;
  set_attrs(b.node("Conv", {x, name + "_w", name + "_b"}, {name}),
            {attr_ints("kernel_shape", {k, k}), attr_ints("strides", {stride, stride}),
             attr_ints("dilations", {dilation, dilation}), attr_ints("pads", {pad, pad, pad, pad})});
}

/// A session of the model `build` writes (opset 17) at `level`, with Winograd convolutions on
/// or off (SessionOptions::winograd_convolutions).
inline Session session_at(const std::function<void(ModelBuilder&)>& build, OptLevel level,
                          bool winograd) {
  ModelBuilder b(17);
  build(b);
  SessionOptions opts;
  opts.opt_level = level;
  opts.winograd_convolutions = winograd;
  return b.session(opts);
}

inline std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

inline void expect_near(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  auto got = t.to_double_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at element " << i;
}

/// A session of a copy of `m` at `level` with `threads` intra-op threads (0: the default): the
/// gradient-fusion tests run the fused graph at 1 and 2 threads against the plain one
/// (OptLevel::None).
inline Session session_of(const Model& m, OptLevel level, int threads = 0) {
  SessionOptions opts;
  opts.opt_level = level;
  opts.intra_op_threads = threads;
  return Session(clone_model(m), opts);
}

/// How many nodes of each "domain:op_type" the session's optimized graph holds.
inline std::map<std::string, int> op_counts(const Session& s) {
  std::map<std::string, int> ops;
  for (const auto& n : s.model().graph->nodes()) ++ops[n->domain + ":" + n->op_type];
  return ops;
}

/// a and b of one shape and dtype, byte for byte.
inline void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

/// The ONNX backend corpus folder (ONYX_ONNX_TESTS or ../shared/onnx-tests).
inline std::string corpus_dir() {
  const char* env = std::getenv("ONYX_ONNX_TESTS");
  return env && *env ? env : ONYX_DEFAULT_CORPUS;
}

}  // namespace onyx::test
