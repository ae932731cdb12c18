// The gradient-sum fusion (inference/fusions_scatter_sum.cpp) and the ai.onyx ScatterAddSum kernel
// (kernels/cpu/scatter_add_sum.cpp): Sum over ScatterND(zeros, indices, updates, add) terms and
// dense terms, and a ScatterND into zeros alone, become one kernel with the same bits: repeated
// and negative indices, tuples of one and two dims, zeros folded or expanded from a symbolic
// shape, 1 and 2 threads. Through autodiff: a tied embedding (Gather + LM head over one table) and
// torch's packed q/k/v (three Gathers of one [3, D] tensor). Zeros under a scatter are not folded
// into constants. Bad operands are onyx::Errors.
#include <gtest/gtest.h>

#include "autodiff/training_graph.h"
#include "graph/onnx_io.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

constexpr int64_t V = 37, D = 20;

/// zeros = Expand(0, shape) under `name`, shape a constant or Shape(`like`).
void add_zeros(ModelBuilder& b, const std::string& name, const Shape& shape,
               const std::string& like = "") {
  b.initializer(name + "_fill", Tensor::from_vector<float>({}, {0.0f}));
  if (like.empty()) {
    b.initializer(name + "_shape",
                  Tensor::from_vector<int64_t>({static_cast<int64_t>(shape.size())}, shape));
  } else {
    b.node("Shape", {like}, {name + "_shape"});
  }
  b.node("Expand", {name + "_fill", name + "_shape"}, {name});
}

void add_scatter(ModelBuilder& b, const std::string& zeros, const std::string& idx,
                 const std::string& upd, const std::string& out) {
  set_attrs(b.node("ScatterND", {zeros, idx, upd}, {out}), {attr_string("reduction", "add")});
}

Tensor ids(const Shape& shape, const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>(shape, v);
}

/// out = Sum(S1, G, S2) over a [V, D] table (S1 with repeated and negative rows), lone =
/// ScatterND into [3, 4, D] zeros with (i, j) tuples, sparse = four rows (one thrice) of a
/// [9000, 2] table, and the feeds.
std::unique_ptr<Model> sums_model(bool symbolic, NamedTensors& feeds) {
  ModelBuilder b(17);
  if (symbolic)
    b.input("G", DataType::Float, SymShape{Dim::symbol("rows"), Dim::symbol("width")});
  else
    b.input("G", DataType::Float, Shape{V, D});
  b.input("i1", DataType::Int64, Shape{9, 1}).input("u1", DataType::Float, Shape{9, D});
  b.input("i2", DataType::Int64, Shape{4, 1}).input("u2", DataType::Float, Shape{4, D});
  b.input("i3", DataType::Int64, Shape{5, 2}).input("u3", DataType::Float, Shape{5, D});
  b.input("i4", DataType::Int64, Shape{4, 1}).input("u4", DataType::Float, Shape{4, 2});
  add_zeros(b, "z1", {V, D}, symbolic ? "G" : "");
  add_zeros(b, "z2", {V, D}, symbolic ? "G" : "");
  add_zeros(b, "z3", {3, 4, D});
  add_zeros(b, "z4", {9000, 2});  // many more rows than updates: the kernel's comparison sort
  add_scatter(b, "z1", "i1", "u1", "s1");
  add_scatter(b, "z2", "i2", "u2", "s2");
  add_scatter(b, "z3", "i3", "u3", "lone");
  add_scatter(b, "z4", "i4", "u4", "sparse");
  b.node("Sum", {"s1", "G", "s2"}, {"out"});
  b.output("out").output("lone").output("sparse");
  feeds = {{"G", randn({V, D}, 1)},
           {"i1", ids({9, 1}, {3, 7, 3, -1, 0, 7, 3, 36, 12})},
           {"u1", randn({9, D}, 2)},
           {"i2", ids({4, 1}, {7, 5, 36, 5})},
           {"u2", randn({4, D}, 3)},
           {"i3", ids({5, 2}, {0, 1, 2, 3, 0, 1, -1, 0, 1, 1})},
           {"u3", randn({5, D}, 4)},
           {"i4", ids({4, 1}, {8000, -1, 8000, 8000})},
           {"u4", randn({4, 2}, 6)}};
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

/// Sum and lone ScatterND of sums_model against ScatterAddSum, bit for bit.
void expect_fused_same_bits(bool symbolic) {
  NamedTensors feeds;
  std::unique_ptr<Model> m = sums_model(symbolic, feeds);
  const Session unfused = session_of(*m, OptLevel::None);
  const NamedTensors want = unfused.run(feeds);
  for (int threads : {1, 2}) {
    const Session fused = session_of(*m, OptLevel::All, threads);
    auto ops = op_counts(fused);
    EXPECT_EQ(ops["ai.onyx:ScatterAddSum"], 3);
    EXPECT_EQ(ops[":ScatterND"], 0);
    EXPECT_EQ(ops[":Sum"], 0);
    // The zero tensors are gone with the nodes that read them.
    EXPECT_EQ(ops[":Expand"], 0);
    const NamedTensors got = fused.run(feeds);
    for (const char* name : {"out", "lone", "sparse"})
      expect_same_bits(got.at(name), want.at(name),
                       std::string(name) + " threads " + std::to_string(threads));
  }
}

/// ids [B, S] -> Gather(W) -> * scale -> MatMul(., Transpose(W)): logits [B, S, V] over the tied
/// table W; q/k/v = Gather(P, 0 / 1 / 2) of a packed [3, D] tensor added on the way.
autodiff::TrainingGraph tied_embedding_graph() {
  ModelBuilder b(17);
  b.input("ids", DataType::Int64, Shape{2, 6});
  b.initializer("W", randn({V, D}, 11, 0.5));
  b.initializer("P", randn({3, D}, 12, 0.5));
  for (int k = 0; k < 3; ++k) {
    const std::string n = std::string(1, "qkv"[k]);
    b.initializer(n + "_i", Tensor::from_vector<int64_t>({}, {k}));
    set_attrs(b.node("Gather", {"P", n + "_i"}, {n}), {attr_int("axis", 0)});
  }
  b.node("Gather", {"W", "ids"}, {"emb"});
  b.node("Mul", {"emb", "q"}, {"h1"});
  b.node("Mul", {"h1", "k"}, {"h2"});
  b.node("Add", {"h2", "v"}, {"h"});
  set_attrs(b.node("Transpose", {"W"}, {"Wt"}), {attr_ints("perm", {1, 0})});
  b.node("MatMul", {"h", "Wt"}, {"logits"});
  b.output("logits");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return autodiff::build_training_graph(
      *m, {.kind = "softmax_cross_entropy", .class_axis = -1}, {"W", "P"});
}

}  // namespace

TEST(ScatterAddSumFusion, SumOfScatteredAndDenseTermsKeepsTheBits) { expect_fused_same_bits(false); }

TEST(ScatterAddSumFusion, ZerosOfASymbolicShapeFuseToo) { expect_fused_same_bits(true); }

TEST(ScatterAddSumFusion, TiedEmbeddingAndPackedQkvGradients) {
  const autodiff::TrainingGraph tg = tied_embedding_graph();
  const Session unfused = session_of(*tg.model, OptLevel::None);
  EXPECT_EQ(op_counts(unfused)[":ScatterND"], 4);  // W's rows, and q, k, v
  const NamedTensors feeds{{"ids", ids({2, 6}, {1, 5, 5, 36, 0, 1, 5, 2, 2, 9, 36, 1})},
                           {"labels", ids({2, 6}, {5, 1, 0, 3, 3, 36, 7, 7, 1, 0, 2, 4})}};
  const NamedTensors want = unfused.run(feeds);
  for (int threads : {1, 2}) {
    const Session fused = session_of(*tg.model, OptLevel::All, threads);
    auto ops = op_counts(fused);
    EXPECT_EQ(ops["ai.onyx:ScatterAddSum"], 2);  // W: head + rows; P: q + k + v
    EXPECT_EQ(ops[":ScatterND"], 0);
    const NamedTensors got = fused.run(feeds);
    // The products around it may round differently at `all`; the sums themselves are exact.
    for (const std::string& g : tg.grads) {
      SCOPED_TRACE(g + " threads " + std::to_string(threads));
      expect_near(got.at(g), values(want.at(g)), 1e-6);
    }
  }
}

TEST(ScatterAddSumFusion, ZerosUnderAScatterAreFilledAtRunTimeNotFolded) {
  // A scatter the fusion does not take (reduction none): its zeros stay an Expand, a fill at
  // run time, instead of a folded constant as large as the table.
  ModelBuilder b(17);
  b.input("i", DataType::Int64, Shape{2, 1}).input("u", DataType::Float, Shape{2, D});
  add_zeros(b, "z", {V, D});
  b.node("ScatterND", {"z", "i", "u"}, {"y"});
  b.output("y");
  Session s = b.session();
  EXPECT_EQ(op_counts(s)[":Expand"], 1);
  EXPECT_EQ(s.model().graph->initializer(s.model().graph->find_value("z")), nullptr);
  const Tensor u = randn({2, D}, 5);
  const Tensor y = s.run({{"i", ids({2, 1}, {4, -2})}, {"u", u}}).at("y");
  std::vector<double> want(static_cast<size_t>(V * D), 0.0);
  const std::vector<double> uv = values(u);
  for (int64_t j = 0; j < D; ++j) {
    want[static_cast<size_t>(4 * D + j)] = uv[static_cast<size_t>(j)];
    want[static_cast<size_t>((V - 2) * D + j)] = uv[static_cast<size_t>(D + j)];
  }
  expect_near(y, want, 0.0);
}

TEST(ScatterAddSumFusion, KernelRefusesBadOperands) {
  auto run = [](const std::vector<int64_t>& terms, const Shape& dense, const Shape& upd,
                const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
    ModelBuilder b(17, "ai.onyx");
    const Shape idx_shape{static_cast<int64_t>(idx.size()), 1};
    b.input("d", DataType::Float, dense).input("u", DataType::Float, upd);
    b.input("i", DataType::Int64, idx_shape);
    b.initializer("shape",
                  Tensor::from_vector<int64_t>({static_cast<int64_t>(shape.size())}, shape));
    std::vector<std::string> ins;
    for (int64_t t : terms) {
      if (t == 0) ins.push_back("d");
      else ins.insert(ins.end(), {"u", "i"});
    }
    ins.push_back("shape");
    set_attrs(b.node("ScatterAddSum", ins, {"y"}, "ai.onyx"), {attr_ints("terms", terms)});
    b.output("y");
    Session s = b.session();
    return s.run({{"d", randn(dense, 1)}, {"u", randn(upd, 2)}, {"i", ids(idx_shape, idx)}});
  };
  const Tensor y = run({0, 1}, {4, 3}, {2, 3}, {1, 1}, {4, 3}).at("y");
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  expect_error([&] { run({0, 1}, {4, 3}, {2, 3}, {1, 4}, {4, 3}); }, "index 4 is out of range");
  expect_error([&] { run({0, 1}, {4, 3}, {2, 2}, {1, 1}, {4, 3}); }, "updates should be float[2, 3]");
  expect_error([&] { run({0, 1}, {4, 2}, {2, 3}, {1, 1}, {4, 3}); }, "term 0 should be float[4, 3]");
  expect_error([&] { run({2}, {4, 3}, {2, 3}, {1, 1}, {4, 3}); }, "terms holds 0 (dense) or 1");
  expect_error([&] { run({1, 1}, {4, 3}, {2, 3}, {1, 1}, {-4, 3}); }, "has a negative dim");
  // The session machinery stays usable after the errors.
  EXPECT_EQ(run({1}, {4, 3}, {2, 3}, {0, 3}, {4, 3}).at("y").shape(), (Shape{4, 3}));
}

}  // namespace onyx::test
