// inference/: Session feeds and outputs, concurrency, memory reuse, profiling, optimization.
#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <atomic>
#include <chrono>
#include <thread>

#include "graph/onnx_io.h"
#include "kernels/arena.h"
#include "test_util.h"

using namespace onyx;
using onyx::test::expect_near;
using onyx::test::ModelBuilder;

namespace {

// y = Relu(x * 2 + 1) with x[batch, 4]; a chain long enough that buffers can be reused.
Session chain_session(SessionOptions opts = {}) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(4)});
  b.initializer("two", Tensor::scalar<float>(2));
  b.initializer("one", Tensor::scalar<float>(1));
  b.node("Mul", {"x", "two"}, {"a"});
  b.node("Add", {"a", "one"}, {"b"});
  b.node("Relu", {"b"}, {"c"});
  b.node("Neg", {"c"}, {"d"});
  b.node("Neg", {"d"}, {"y"});
  b.output("y");
  b.output("a");
  return b.session(opts);
}

Tensor iota(int64_t batch) {
  std::vector<float> v(static_cast<size_t>(batch * 4));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 3.f;
  return Tensor::from_vector<float>({batch, 4}, v);
}

}  // namespace

TEST(Session, RunsAnyBatchSizeItsSymbolsAllow) {
  Session s = chain_session();
  for (int64_t batch : {1, 3, 17}) {
    auto out = s.run({{"x", iota(batch)}});
    const Tensor& y = out.at("y");
    ASSERT_EQ(y.shape(), (Shape{batch, 4}));
    auto x = iota(batch).to_double_vector();
    auto got = y.to_double_vector();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(got[i], std::max(0.0, x[i] * 2 + 1));
  }
}

TEST(Session, ChoiceOfOutputs) {
  Session s = chain_session();
  auto out = s.run({{"x", iota(2)}}, {"a"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.count("a"), 1u);
  EXPECT_THROW(s.run({{"x", iota(2)}}, {"nope"}), Error);
}

// Outputs that view a weight (Identity, one row Gathered) come back as copies: writing into
// them does not change the next run's results. Views of the input (a Reshape, a unit-dim
// Transpose) stay views of the caller's memory (the zero-copy promise of the Python door).
TEST(Session, OutputsThatViewAWeightAreTheCallersOwn) {
  for (OptLevel level : {OptLevel::None, OptLevel::All}) {
    test::ModelBuilder b(17);
    b.input("x", DataType::Float, Shape{1, 2, 3});
    b.initializer("w", Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6}));
    b.initializer("row", Tensor::scalar<int64_t>(1));
    b.initializer("flat", Tensor::from_vector<int64_t>({1}, {6}));
    b.node("Identity", {"w"}, {"w_out"});
    b.node("Gather", {"w", "row"}, {"w_row"});
    b.node("Reshape", {"x", "flat"}, {"x_flat"});
    b.node("Transpose", {"x"}, {"x_t"}).attrs["perm"] = test::attr_ints("perm", {1, 0, 2});
    for (const char* o : {"w_out", "w_row", "x_flat", "x_t"}) b.output(o);
    SessionOptions opts;
    opts.opt_level = level;
    Session s = b.session(opts);
    Tensor x = Tensor::from_vector<float>({1, 2, 3}, {7, 8, 9, 10, 11, 12});
    NamedTensors first = s.run({{"x", x}});
    EXPECT_EQ(first.at("w_row").to_double_vector(), (std::vector<double>{4, 5, 6}));
    EXPECT_EQ(first.at("x_t").shape(), (Shape{2, 1, 3}));
    EXPECT_EQ(first.at("x_flat").raw(), x.raw());
    EXPECT_EQ(first.at("x_t").raw(), x.raw());
    for (const char* o : {"w_out", "w_row"}) first.at(o).data<float>()[0] = -100.f;
    NamedTensors again = s.run({{"x", x}});
    EXPECT_EQ(again.at("w_out").to_double_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(again.at("w_row").to_double_vector(), (std::vector<double>{4, 5, 6}));
    EXPECT_EQ(again.at("x_flat").to_double_vector(), (std::vector<double>{7, 8, 9, 10, 11, 12}));
    EXPECT_EQ(again.at("x_t").to_double_vector(), (std::vector<double>{7, 8, 9, 10, 11, 12}));
  }
}

// RunOptions::output_buffers: an output whose kernel allocates it (also through Identity
// nodes, as autodiff names gradients) is computed into the caller's buffer of its dtype and
// shape; a mismatched buffer, a view of a feed and an unbound output leave theirs alone.
TEST(Session, OutputBuffersTakeTheOutputsTheirKernelsAllocate) {
  for (OptLevel level : {OptLevel::None, OptLevel::All}) {
    SCOPED_TRACE(static_cast<int>(level));
    ModelBuilder b(17);
    b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(4)});
    b.initializer("two", Tensor::scalar<float>(2));
    b.initializer("flat", Tensor::from_vector<int64_t>({1}, {-1}));
    b.node("Mul", {"x", "two"}, {"a"});
    b.node("Relu", {"a"}, {"r"});
    b.node("Identity", {"r"}, {"r_id"});
    b.node("Identity", {"r_id"}, {"y"});
    b.node("Reshape", {"x", "flat"}, {"v"});
    b.node("Neg", {"x"}, {"n"});
    for (const char* o : {"y", "a", "v", "n"}) b.output(o);
    SessionOptions opts;
    opts.opt_level = level;
    Session s = b.session(opts);
    Tensor x = iota(2);
    RunOptions ro;
    ro.output_buffers["y"] = Tensor::from_vector<float>({2, 4}, std::vector<float>(8, 7.f));
    ro.output_buffers["a"] = Tensor::from_vector<float>({3, 4}, std::vector<float>(12, 7.f));  // not a's shape
    ro.output_buffers["v"] = Tensor::from_vector<float>({8}, std::vector<float>(8, 7.f));     // v is a view of x
    NamedTensors out = s.run({{"x", x}}, {}, ro);
    const auto xs = x.to_double_vector();
    EXPECT_EQ(out.at("y").raw(), ro.output_buffers["y"].raw());
    auto y = ro.output_buffers["y"].to_double_vector(), a = out.at("a").to_double_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(y[i], std::max(0.0, 2 * xs[i]));
      EXPECT_EQ(a[i], 2 * xs[i]);
    }
    EXPECT_NE(out.at("a").raw(), ro.output_buffers["a"].raw());
    EXPECT_EQ(out.at("v").raw(), x.raw());
    for (const char* untouched : {"a", "v"})
      for (double e : ro.output_buffers[untouched].to_double_vector()) EXPECT_EQ(e, 7.0) << untouched;
    // Another batch: y's buffer no longer fits, so y comes back in memory of its own.
    NamedTensors other = s.run({{"x", iota(3)}}, {}, ro);
    EXPECT_NE(other.at("y").raw(), ro.output_buffers["y"].raw());
    EXPECT_EQ(other.at("y").shape(), (Shape{3, 4}));
    EXPECT_EQ(ro.output_buffers["y"].to_double_vector(), y);
  }
}

TEST(Session, FeedErrorsNameTheProblem) {
  Session s = chain_session();
  auto expect_error = [&](const NamedTensors& feeds, const std::string& needle) {
    try {
      s.run(feeds);
      FAIL() << "expected onyx::Error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({{"x", Tensor::zeros(DataType::Int64, {2, 4})}}, "expects dtype float but got int64");
  expect_error({{"x", Tensor::zeros(DataType::Float, {2, 5})}}, "dim 1 must be 4");
  expect_error({{"x", Tensor::zeros(DataType::Float, {8})}}, "expects rank 2");
  expect_error({{"y", iota(1)}}, "not an input");
  expect_error({}, "missing feed for input 'x'");
  // The session is still usable after bad feeds.
  auto out = s.run({{"x", iota(1)}});
  EXPECT_EQ(out.at("y").shape(), (Shape{1, 4}));
}

TEST(Session, SymbolsMustAgreeAcrossInputs) {
  ModelBuilder b(17);
  b.input("p", DataType::Float, SymShape{Dim::symbol("n")});
  b.input("q", DataType::Float, SymShape{Dim::symbol("n")});
  b.node("Add", {"p", "q"}, {"y"});
  b.output("y");
  Session s = b.session();
  EXPECT_THROW(s.run({{"p", Tensor::zeros(DataType::Float, {2})}, {"q", Tensor::zeros(DataType::Float, {3})}}),
               Error);
}

TEST(Session, ConcurrentRunsFromFourThreads) {
  Session s = chain_session({.intra_op_threads = 1});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        int64_t batch = 1 + (t * 7 + i) % 9;
        auto out = s.run({{"x", iota(batch)}});
        auto x = iota(batch).to_double_vector();
        auto got = out.at("y").to_double_vector();
        bool good = got.size() == x.size();
        for (size_t k = 0; good && k < x.size(); ++k) good = got[k] == std::max(0.0, x[k] * 2 + 1);
        if (good) ++ok;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 200);
}

TEST(Session, IntermediatesAreReleasedAndPeakReported) {
  Session s = chain_session();
  RunStats stats;
  int64_t batch = 1024;
  s.run({{"x", iota(batch)}}, {}, &stats);
  size_t one = static_cast<size_t>(batch) * 4 * sizeof(float);
  // Five nodes each make a tensor of `one` bytes; y and a must stay, the rest are freed
  // after their last reader, so at most four are alive at once.
  EXPECT_GE(stats.peak_bytes, 2 * one);
  EXPECT_LE(stats.peak_bytes, 4 * one);
  EXPECT_EQ(stats.nodes_run, 5u);
}

TEST(Arena, ReusesFreedBlocks) {
  auto arena = std::make_shared<Arena>();
  {
    Tensor a = Tensor::empty(DataType::Float, {1000}, arena);
  }
  size_t reserved = arena->reserved_bytes();
  for (int i = 0; i < 10; ++i) Tensor b = Tensor::empty(DataType::Float, {990}, arena);
  EXPECT_EQ(arena->reserved_bytes(), reserved);
  EXPECT_EQ(arena->in_use_bytes(), 0u);
}

// ONYX_HUGE_PAGES=1: blocks of 2 MB and more come in whole, 2 MB-aligned huge pages (advised
// with madvise; whether the kernel grants them is its business), smaller ones as before, and
// both are ordinary memory that a session runs in and frees.
TEST(HeapAllocator, HugePagesOnRequestOnlyForLargeBlocks) {
  const auto aligned = [](const Tensor& t, size_t to) {
    return reinterpret_cast<uintptr_t>(t.raw()) % to == 0;
  };
  ::setenv("ONYX_HUGE_PAGES", "1", 1);
  {
    Tensor big = Tensor::zeros(DataType::Float, {int64_t{3} << 20});  // 12 MB
    Tensor small = Tensor::zeros(DataType::Float, {1000});
    EXPECT_TRUE(aligned(big, size_t{2} << 20));
    EXPECT_TRUE(aligned(small, 64));
    big.data<float>()[big.numel() - 1] = 2.5f;
    EXPECT_EQ(big.data<float>()[big.numel() - 1], 2.5f);
    EXPECT_EQ(big.data<float>()[0], 0.0f);
    // A run whose activations (3.2 MB each) take the huge-page path.
    Session s = chain_session();
    const int64_t batch = 200000;
    Tensor y = s.run({{"x", iota(batch)}}).at("y");
    EXPECT_TRUE(aligned(y, size_t{2} << 20));
    for (int64_t i : {int64_t{0}, int64_t{5}, batch * 4 - 1})
      EXPECT_FLOAT_EQ(y.data<float>()[i], std::max(0.0f, (static_cast<float>(i) - 3.f) * 2 + 1));
  }
  ::unsetenv("ONYX_HUGE_PAGES");
  // Off again: a large block is only 64-byte aligned by contract (it may happen to be more).
  Tensor big = Tensor::zeros(DataType::Float, {int64_t{3} << 20});
  EXPECT_TRUE(aligned(big, 64));
}

/// How many of the 4 KB pages wholly inside [p, p + bytes) are resident (mincore).
static size_t resident_pages(const void* p, size_t bytes) {
  const uintptr_t page = 4096, at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (at + page - 1) & ~(page - 1), end = (at + bytes) & ~(page - 1);
  std::vector<unsigned char> in((end - begin) / page);
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(begin), end - begin, in.data()), 0);
  return static_cast<size_t>(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }));
}

// Blocks of 1 MB and more from cpu_allocator() arrive with their pages mapped (one
// MADV_POPULATE_WRITE instead of a fault a page); cpu_allocator_unpopulated() leaves a fresh
// block's pages to its first touch, for the loader whose copy threads populate their own parts.
// Both hold ordinary writable memory, and populate_pages takes any range, page-aligned or not.
TEST(HeapAllocator, PopulatesLargeBlocksUnlessAskedNotTo) {
  // The advice needs Linux 5.14 (Debian 12 has 6.1); elsewhere populate_pages is a no-op.
  void* probe = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool kernel_populates = ::madvise(probe, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
  ::munmap(probe, 4096);
  if (!kernel_populates) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";

  const int64_t n = int64_t{4} << 20;  // 16 MB: glibc maps a fresh block for it
  const size_t bytes = static_cast<size_t>(n) * 4, whole = bytes / 4096 - 1;
  Tensor populated = Tensor::empty(DataType::Float, {n});
  EXPECT_GE(resident_pages(populated.raw(), bytes), whole);
  Tensor lazy = Tensor::empty(DataType::Float, {n}, cpu_allocator_unpopulated());
  EXPECT_LT(resident_pages(lazy.raw(), bytes), whole / 2);
  // An unaligned part of it, as a copy thread populates its share.
  char* part = static_cast<char*>(lazy.raw()) + 12345;
  populate_pages(part, 5 << 20);
  EXPECT_GE(resident_pages(part, 5 << 20), size_t{(5 << 20) / 4096 - 1});
  populate_pages(part, 0);
  populate_pages(part, 100);  // inside one page: nothing whole to populate
  for (Tensor* t : {&populated, &lazy}) {
    float* f = t->data<float>();
    f[0] = 1.5f;
    f[n - 1] = -2.5f;
    EXPECT_EQ(f[0] + f[n - 1], -1.0f);
  }
  // A small block is not populated ahead (glibc mostly recycles those).
  Tensor small = Tensor::empty(DataType::Float, {1000});
  small.data<float>()[999] = 3.0f;
  EXPECT_EQ(small.data<float>()[999], 3.0f);
}

TEST(Session, ConstantFoldingAndDeadCodeElimination) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{3});
  b.initializer("c", Tensor::from_vector<float>({3}, {1, 2, 3}));
  b.node("Neg", {"c"}, {"nc"});        // constant: folded
  b.node("Add", {"x", "nc"}, {"y"});
  b.node("Relu", {"x"}, {"unused"});   // dead: removed
  b.output("y");
  auto model = b.build();
  std::string bytes = serialize_model(*model);
  Session basic = Session::from_bytes(bytes.data(), bytes.size(), {.opt_level = OptLevel::Basic});
  Session none = Session::from_bytes(bytes.data(), bytes.size(), {.opt_level = OptLevel::None});
  EXPECT_EQ(basic.model().graph->num_nodes(), 1u);
  EXPECT_EQ(none.model().graph->num_nodes(), 3u);
  auto x = Tensor::from_vector<float>({3}, {10, 10, 10});
  expect_near(basic.run({{"x", x}}).at("y"), {9, 8, 7});
  expect_near(none.run({{"x", x}}).at("y"), {9, 8, 7});
}

// torch.onnx computes the attention scale from the head size at run time: Shape -> Slice ->
// Cast -> Sqrt -> Div on a [batch, heads, 64] value. The Slice picks a fixed dim, so it folds
// to 64 although the shape has a symbolic one, and the float steps after it fold as constants;
// the Gather of the symbolic batch dim and the Reshape it feeds stay. Same results at two
// batch sizes, with and without folding.
TEST(Session, FixedDimsOfPartlySymbolicShapesFold) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(4), Dim::fixed(64)});
  b.initializer("start", Tensor::from_vector<int64_t>({1}, {-1}));
  b.initializer("end", Tensor::from_vector<int64_t>({1}, {INT64_MAX}));
  b.initializer("zero", Tensor::from_vector<int64_t>({}, {0}));
  b.initializer("axes0", Tensor::from_vector<int64_t>({1}, {0}));
  b.initializer("minus1", Tensor::from_vector<int64_t>({1}, {-1}));
  b.initializer("one", Tensor::from_vector<float>({}, {1.0f}));
  b.node("Shape", {"x"}, {"s"});
  b.node("Slice", {"s", "start", "end"}, {"d"});  // [64]
  b.node("Cast", {"d"}, {"df"}).attrs["to"] = test::attr_int("to", 1);
  b.node("Sqrt", {"df"}, {"r"});
  b.node("Div", {"one", "r"}, {"scale"});
  b.node("Mul", {"x", "scale"}, {"y"});
  b.node("Gather", {"s", "zero"}, {"batch"});  // symbolic: stays
  b.node("Unsqueeze", {"batch", "axes0"}, {"b1"});
  b.node("Concat", {"b1", "minus1"}, {"flat"}).attrs["axis"] = test::attr_int("axis", 0);
  b.node("Reshape", {"y", "flat"}, {"out"});
  b.output("out");
  std::string bytes = serialize_model(*b.build());
  Session folded = Session::from_bytes(bytes.data(), bytes.size(), {.opt_level = OptLevel::Basic});
  Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.opt_level = OptLevel::None});
  EXPECT_EQ(plain.model().graph->num_nodes(), 10u);
  EXPECT_EQ(folded.model().graph->num_nodes(), 6u);  // Shape, Gather, Unsqueeze, Concat, Mul, Reshape
  for (const Node* n : folded.model().graph->topological_order())
    EXPECT_TRUE(n->op_type != "Slice" && n->op_type != "Sqrt" && n->op_type != "Div") << n->op_type;
  for (int64_t batch : {2, 3}) {
    std::vector<float> xs(static_cast<size_t>(batch * 4 * 64));
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 37) - 18.0f;
    Tensor x = Tensor::from_vector<float>({batch, 4, 64}, xs);
    Tensor got = folded.run({{"x", x}}).at("out");
    Tensor want = plain.run({{"x", x}}).at("out");
    ASSERT_EQ(got.shape(), (Shape{batch, 256}));
    ASSERT_EQ(want.shape(), got.shape());
    for (int64_t i = 0; i < got.numel(); ++i) {
      EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
      EXPECT_EQ(got.data<float>()[i], xs[static_cast<size_t>(i)] / 8.0f) << i;
    }
  }
}

TEST(Session, ProfilingWritesChromeTrace) {
  auto path = (std::filesystem::temp_directory_path() / ("onyx_profile_" + std::to_string(getpid()) + ".json")).string();
  Session s = chain_session({.profiling = true, .profile_path = path});
  s.run({{"x", iota(2)}});
  EXPECT_EQ(s.end_profiling(), path);
  auto j = nlohmann::json::parse(std::ifstream(path));
  int nodes = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["cat"] == "node") {
      ++nodes;
      EXPECT_TRUE(e["args"].contains("op"));
      EXPECT_TRUE(e["args"].contains("input_shapes"));
      EXPECT_GE(e["dur"].get<int64_t>(), 0);
    } else {
      EXPECT_TRUE(e["args"].contains("peak_bytes"));
    }
  }
  EXPECT_EQ(nodes, 5);
}

TEST(Session, MetadataDescribesTheModel) {
  Session s = chain_session();
  ASSERT_EQ(s.inputs().size(), 1u);
  EXPECT_EQ(s.inputs()[0].name, "x");
  EXPECT_EQ(s.inputs()[0].type.elem, DataType::Float);
  EXPECT_EQ(sym_shape_str(*s.inputs()[0].type.shape), "[batch, 4]");
  ASSERT_EQ(s.outputs().size(), 2u);
  EXPECT_EQ(s.metadata().opsets.at(0).version, 17);
}

// A Loop body must return the condition and each carried value; one that returns fewer (here
// none, then only the condition for one carried value) is refused when the session is built,
// not turned into a negative scan-output count.
TEST(Session, LoopBodyWithTooFewOutputsIsAClearError) {
  for (size_t n_body_outputs : {0u, 1u}) {
    ModelBuilder b(17);
    b.input("m", DataType::Int64, Shape{}).input("c", DataType::Bool, Shape{});
    b.input("x", DataType::Float, Shape{2});
    Node& loop = b.node("Loop", {"m", "c", "x"}, {"y"});
    b.output("y");
    auto m = b.build();
    auto body = std::make_shared<Graph>("body", m->graph.get());
    for (const char* n : {"i", "cond", "xb"}) body->inputs.push_back(body->get_or_add_value(n));
    body->inputs[0]->type = ValueType::tensor(DataType::Int64, SymShape{});
    body->inputs[1]->type = ValueType::tensor(DataType::Bool, SymShape{});
    body->inputs[2]->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(2)});
    if (n_body_outputs == 1) body->outputs.push_back(body->inputs[1]);
    Attribute a;
    a.name = "body", a.type = Attribute::Type::Graph, a.g = body;
    loop.attrs["body"] = a;
    try {
      Session s(std::move(m));
      s.run({{"m", Tensor::scalar<int64_t>(2)}, {"c", Tensor::scalar<bool>(true)},
             {"x", Tensor::from_vector<float>({2}, {1, 2})}});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("Loop node"), std::string::npos) << msg;
      EXPECT_NE(msg.find(fmt::format("the body has {} outputs, expected at least 2", n_body_outputs)),
                std::string::npos)
          << msg;
    }
  }
}

namespace {

/// Loop without a trip count whose body passes the condition through (and adds 1 to x, or
/// with `empty_body` passes x through too): with cond true it never ends.
std::unique_ptr<Model> endless_loop(bool empty_body) {
  ModelBuilder b(17);
  b.input("c", DataType::Bool, Shape{}).input("x", DataType::Float, Shape{2});
  Node& loop = b.node("Loop", {"", "c", "x"}, {"y"});
  b.output("y");
  auto m = b.build();
  auto body = std::make_shared<Graph>("body", m->graph.get());
  for (const char* n : {"i", "cond", "xb"}) body->inputs.push_back(body->get_or_add_value(n));
  body->inputs[0]->type = ValueType::tensor(DataType::Int64, SymShape{});
  body->inputs[1]->type = ValueType::tensor(DataType::Bool, SymShape{});
  body->inputs[2]->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(2)});
  body->outputs.push_back(body->inputs[1]);
  if (empty_body) {
    body->outputs.push_back(body->inputs[2]);
  } else {
    Value* one = body->add_initializer("one", Tensor::from_vector<float>({1}, {1}));
    Value* next = body->get_or_add_value("next");
    body->add_node("Add", {body->inputs[2], one}, {next}, "", "add_one");
    body->outputs.push_back(next);
  }
  Attribute a;
  a.name = "body", a.type = Attribute::Type::Graph, a.g = body;
  loop.attrs["body"] = a;
  return m;
}

}  // namespace

// A run that never finishes (a Loop whose condition stays true) ends at RunOptions::deadline
// or when RunOptions::terminate is set from another thread, with an onyx::Error; the session
// stays usable.
TEST(Session, DeadlineAndTerminateEndAnEndlessLoop) {
  const NamedTensors endless{{"c", Tensor::scalar<bool>(true)}, {"x", Tensor::from_vector<float>({2}, {1, 2})}};
  for (bool empty_body : {false, true}) {
    SCOPED_TRACE(empty_body);
    Session s(endless_loop(empty_body));
    RunOptions ro;
    const auto t0 = std::chrono::steady_clock::now();
    ro.deadline = t0 + std::chrono::milliseconds(200);
    try {
      s.run(endless, {}, ro);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[run] cancelled: RunOptions::deadline passed"), std::string::npos)
          << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));

    std::atomic<bool> stop{false};
    RunOptions cancel;
    cancel.terminate = &stop;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      stop = true;
    });
    try {
      s.run(endless, {}, cancel);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("RunOptions::terminate was set"), std::string::npos) << e.what();
    }
    canceller.join();
    // Still usable: with the condition false the body never runs and x comes back.
    auto y = s.run({{"c", Tensor::scalar<bool>(false)}, {"x", Tensor::from_vector<float>({2}, {1, 2})}});
    expect_near(y.at("y"), {1, 2});
  }
}

// Found by tests/fuzz/fuzz_model.cpp: a Scan whose state variable is an omitted input ("")
// dereferenced a null input in the kernel; it is an onyx::Error naming the node and the state.
TEST(Session, ScanWithAnOmittedStateVariableIsAClearError) {
  ModelBuilder b(16);
  b.input("x", DataType::Float, Shape{3, 2});
  Node& scan = b.node("Scan", {"", "x"}, {"s", "ys"});
  scan.attrs["num_scan_inputs"] = onyx::test::attr_int("num_scan_inputs", 1);
  b.output("s").output("ys");
  auto m = b.build();
  auto body = std::make_shared<Graph>("body", m->graph.get());
  Value* state = body->get_or_add_value("state");
  Value* elem = body->get_or_add_value("elem");
  Value* next = body->get_or_add_value("next");
  Value* copy = body->get_or_add_value("copy");
  state->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(2)});
  elem->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(2)});
  body->inputs = {state, elem};
  body->add_node("Add", {state, elem}, {next});
  body->add_node("Identity", {next}, {copy});
  body->outputs = {next, copy};
  Attribute a;
  a.name = "body", a.type = Attribute::Type::Graph, a.g = body;
  scan.attrs["body"] = a;
  try {
    Session s(std::move(m));
    s.run({{"x", Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6})}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Scan node"), std::string::npos) << msg;
    EXPECT_NE(msg.find("state variable 0"), std::string::npos) << msg;
  }
}

// Found by tests/fuzz/fuzz_model.cpp: a Scan body returning fewer outputs than there are state
// variables made the scan-output count negative (std::length_error, the process ended); it is
// refused when the session is built.
TEST(Session, ScanBodyWithTooFewOutputsIsAClearError) {
  ModelBuilder b(16);
  b.input("s0", DataType::Float, Shape{2}).input("s1", DataType::Float, Shape{2});
  b.input("x", DataType::Float, Shape{3, 2});
  Node& scan = b.node("Scan", {"s0", "s1", "x"}, {"f0", "f1"});
  scan.attrs["num_scan_inputs"] = onyx::test::attr_int("num_scan_inputs", 1);
  b.output("f0").output("f1");
  auto m = b.build();
  auto body = std::make_shared<Graph>("body", m->graph.get());
  for (const char* n : {"a", "c", "e"}) {
    Value* v = body->get_or_add_value(n);
    v->type = ValueType::tensor(DataType::Float, SymShape{Dim::fixed(2)});
    body->inputs.push_back(v);
  }
  body->outputs = {body->inputs[0]};  // one output for two state variables
  Attribute a;
  a.name = "body", a.type = Attribute::Type::Graph, a.g = body;
  scan.attrs["body"] = a;
  try {
    Session s(std::move(m));
    s.run({{"s0", Tensor::zeros(DataType::Float, {2})}, {"s1", Tensor::zeros(DataType::Float, {2})},
           {"x", Tensor::zeros(DataType::Float, {3, 2})}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Scan node"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the body has 1 outputs, expected at least 2"), std::string::npos) << msg;
  }
}

TEST(Session, MissingKernelIsAClearError) {
  ModelBuilder b(17, "com.example");
  b.input("x", DataType::Float, Shape{2});
  b.node("Frobnicate", {"x"}, {"y"}, "com.example");
  b.output("y");
  try {
    b.session();
    FAIL();
  } catch (const NotImplemented& e) {
    EXPECT_NE(std::string(e.what()).find("Frobnicate"), std::string::npos) << e.what();
  }
}

// An op found only under another domain names the domain and opset it was looked up in, and
// where onyx has it (it used to say just "no cpu kernel for Relu").
TEST(Session, MissingKernelNamesTheDomain) {
  ModelBuilder b(17, "com.foo");
  b.input("x", DataType::Float, Shape{2});
  b.node("Relu", {"x"}, {"y"}, "com.foo");
  b.output("y");
  try {
    b.session();
    FAIL();
  } catch (const NotImplemented& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for op 'Relu' in domain 'com.foo' (opset 1) on "
                                         "provider cpu: onyx has 'Relu' only in domain 'ai.onnx'"),
              std::string::npos)
        << e.what();
  }
}
