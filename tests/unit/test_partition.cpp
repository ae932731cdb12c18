// Placement over several providers, copy insertion and fallback, with no GPU: a test provider
// whose "device" memory is host memory tagged DeviceType::Test. Its kernels (a few CPU kernels
// wrapped) refuse any input tensor that is not in its memory, and the executor refuses a
// tensor on the wrong device for any kernel, so a copy the partitioner forgot fails here as it
// would on a GPU (where the kernel would read a host pointer as a device one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "inference/executor.h"
#include "inference/partition.h"
#include "inference/run_allocator.h"
#include "kernels/arena.h"
#include "kernels/provider.h"
#include "test_util.h"

namespace onyx::test {
namespace {

constexpr Device kTestDevice{DeviceType::Test, 0};

class TestDeviceMemory final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) throw std::bad_alloc();
    ++allocations;
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
  Device device() const override { return kTestDevice; }
  std::atomic<int> allocations{0};
};

class CountingHostMemory final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    ++allocations;
    return cpu_allocator()->allocate(bytes);
  }
  void deallocate(void* p, size_t bytes) override { cpu_allocator()->deallocate(p, bytes); }
  std::atomic<int> allocations{0};
};

/// A CPU kernel that first checks that every input it reads as data is in test-device memory.
class DeviceOnlyKernel final : public Kernel {
 public:
  DeviceOnlyKernel(std::unique_ptr<Kernel> inner, std::vector<int> host_inputs)
      : inner_(std::move(inner)), host_inputs_(std::move(host_inputs)) {}
  void compute(KernelContext& ctx) const override {
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      const bool host = std::find(host_inputs_.begin(), host_inputs_.end(), i) != host_inputs_.end();
      if (t && !host && t->device() != kTestDevice)
        ONYX_THROW("[{}] testdev refuses a {} pointer for input {}", ctx.label(), t->device().str(), i);
    }
    inner_->compute(ctx);
  }

 private:
  std::unique_ptr<Kernel> inner_;
  std::vector<int> host_inputs_;
};

void copy_bytes(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

/// Float Add, Mul, Relu, MatMul and Reshape (shape read on the host) on the test device.
KernelRegistry test_registry() {
  KernelRegistry r;
  for (const KernelDef& d : cpu_kernel_registry().defs()) {
    const bool wanted = d.domain.empty() && (d.op_type == "Add" || d.op_type == "Mul" || d.op_type == "Relu" ||
                                             d.op_type == "MatMul" || d.op_type == "Reshape");
    if (!wanted) continue;
    KernelDef t = d;
    t.provider = "testdev";
    if (d.op_type != "Reshape") t.types = {DataType::Float};
    if (d.op_type == "Reshape") t.host_inputs = {1};
    t.create = [cpu = d.create, host = t.host_inputs](const KernelInfo& info) -> std::unique_ptr<Kernel> {
      return std::make_unique<DeviceOnlyKernel>(cpu(info), host);
    };
    r.add(std::move(t));
  }
  r.add({.op_type = "MemcpyFromHost", .domain = "ai.onyx", .provider = "testdev", .type_input = -1,
         .create = function_factory(copy_bytes), .host_inputs = {0}});
  r.add({.op_type = "MemcpyToHost", .domain = "ai.onyx", .provider = "testdev", .type_input = -1,
         .create = function_factory(copy_bytes), .host_outputs = {0}});
  return r;
}

class TestRun final : public RunResources {
 public:
  explicit TestRun(std::atomic<int>& syncs) : syncs_(syncs) {}
  void synchronize() override { ++syncs_; }

 private:
  std::atomic<int>& syncs_;
};

class TestProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return "testdev"; }
  Device device() const override { return kTestDevice; }
  std::shared_ptr<Allocator> allocator() const override { return arena_; }
  const KernelRegistry& registry() const override {
    static const KernelRegistry r = test_registry();
    return r;
  }
  std::unique_ptr<RunResources> begin_run() const override { return std::make_unique<TestRun>(syncs); }
  std::shared_ptr<Allocator> host_allocator() const override { return host_memory; }
  void copy(const Tensor& src, Tensor& dst, RunResources*) const override {
    ++copies;
    if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }
  std::shared_ptr<TestDeviceMemory> memory = std::make_shared<TestDeviceMemory>();
  /// Where copies to the host land (CUDA's is page-locked): counted to see it used.
  std::shared_ptr<CountingHostMemory> host_memory = std::make_shared<CountingHostMemory>();
  mutable std::atomic<int> copies{0}, syncs{0};

 private:
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>(memory);
};

std::shared_ptr<TestProvider> last_provider;

void register_test_provider() {
  register_provider("testdev", [](int) {
    last_provider = std::make_shared<TestProvider>();
    return last_provider;
  });
}

SessionOptions on_testdev() {
  register_test_provider();
  SessionOptions o;
  o.providers = {"testdev", "cpu"};
  o.intra_op_threads = 1;
  return o;
}

std::map<std::string, NodePlacement> by_op(const Session& s) {
  std::map<std::string, NodePlacement> m;
  for (const NodePlacement& p : s.placement()) m[p.op_type + (m.count(p.op_type) ? "#2" : "")] = p;
  return m;
}

/// x [2, 3] -> Add(w) -> Relu -> Softmax (no testdev kernel) -> Mul(2) -> y
std::unique_ptr<Model> chain_model() {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3});
  b.initializer("w", Tensor::from_vector<float>({3}, {1, -2, 3}));
  b.initializer("two", Tensor::scalar<float>(2));
  b.node("Add", {"x", "w"}, {"a"});
  b.node("Relu", {"a"}, {"r"});
  b.node("Softmax", {"r"}, {"s"});
  b.node("Mul", {"s", "two"}, {"y"});
  b.output("y");
  return b.build();
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(Partition, NodesGoToTheFirstProviderWithAKernelAndCopiesAreNodes) {
  Session s(chain_model(), on_testdev());
  auto m = by_op(s);
  EXPECT_EQ(m.at("Add").provider, "testdev");
  EXPECT_EQ(m.at("Relu").provider, "testdev");
  EXPECT_EQ(m.at("Softmax").provider, "cpu");
  EXPECT_TRUE(m.at("Softmax").fallback);
  EXPECT_FALSE(m.at("Add").fallback);
  EXPECT_EQ(m.at("Mul").provider, "testdev");
  // x and the two weights go to the device, Relu's output comes back for Softmax, and
  // Softmax's output goes out again: one copy node per value and direction.
  int from_host = 0, to_host = 0;
  for (const NodePlacement& p : s.placement()) {
    from_host += p.op_type == "MemcpyFromHost";
    to_host += p.op_type == "MemcpyToHost";
    if (p.domain == "ai.onyx") {
      EXPECT_EQ(p.provider, "testdev") << p.node;
    }
  }
  EXPECT_EQ(from_host, 4);
  EXPECT_EQ(to_host, 1);
  // The weights were copied once, at session creation.
  EXPECT_EQ(last_provider->copies.load(), 2);

  Tensor x = Tensor::from_vector<float>({2, 3}, {0.5f, 1, -1, 2, 0, 4});
  Session cpu(chain_model(), {.intra_op_threads = 1});
  RunStats stats;
  auto out = s.run({{"x", x}}, {}, &stats);
  EXPECT_EQ(out.at("y").device(), Device{});  // back on the host by default
  EXPECT_EQ(values(out.at("y")), values(cpu.run({{"x", x}}).at("y")));
  EXPECT_EQ(last_provider->copies.load(), 3);  // + the output's copy to the host
  // Relu's output copied back for Softmax, and the output y: in the provider's host memory.
  EXPECT_EQ(last_provider->host_memory->allocations.load(), 2);
  EXPECT_GE(last_provider->syncs.load(), 1);
  EXPECT_GT(stats.device_peak_bytes, 0u);
  // The weights and the run's blocks came from the device arena; what the run freed is cached.
  EXPECT_GE(stats.device_reserved_bytes, stats.device_peak_bytes);
  EXPECT_GT(stats.device_cached_bytes, 0u);
  EXPECT_LE(stats.device_cached_bytes, stats.device_reserved_bytes);
}

TEST(Partition, AKernelHandedHostMemoryFails) {
  // What a forgotten copy would do: the device kernel gets a host tensor.
  register_test_provider();
  auto p = make_provider("testdev");
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{3});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  auto model = b.build();
  Placement placement;
  placement.providers = {p, make_cpu_provider()};
  placement.provider_of[model->graph->nodes()[0].get()] = 0;  // no partition_graph: no copies
  auto plan = compile_plan(*model->graph, *model, placement);
  RunContext rc;
  rc.allocator = cpu_allocator();
  try {
    execute_plan(*plan, {Datum(Tensor::from_vector<float>({3}, {1, -1, 2}))}, nullptr, rc);
    FAIL() << "a host tensor reached a testdev kernel";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is in cpu memory, but its kernel reads test:0 memory: a copy node is missing"),
              std::string::npos)
        << e.what();
  }
}

TEST(Partition, ShapeComputationsStayOnTheHostAndShapeForcesNoCopy) {
  // y = Reshape(Relu(x), Concat(Shape(x)[0], -1)): the shape arithmetic runs on the CPU, the
  // shape is read where Relu's output lives, and Reshape reads its shape on the host.
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 2});
  b.initializer("zero", Tensor::from_vector<int64_t>({1}, {0}));
  b.initializer("minus1", Tensor::from_vector<int64_t>({1}, {-1}));
  b.node("Relu", {"x"}, {"r"});
  b.node("Shape", {"r"}, {"shape"});
  b.node("Gather", {"shape", "zero"}, {"n"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Concat", {"n", "minus1"}, {"target"}).attrs["axis"] = attr_int("axis", 0);
  b.node("Reshape", {"r", "target"}, {"y"});
  b.output("y");
  Session s(b.build(), on_testdev());
  auto m = by_op(s);
  EXPECT_EQ(m.at("Relu").provider, "testdev");
  EXPECT_EQ(m.at("Reshape").provider, "testdev");
  for (const char* op : {"Shape", "Gather", "Concat"}) {
    EXPECT_EQ(m.at(op).provider, "cpu") << op;
    EXPECT_FALSE(m.at(op).fallback) << op;
  }
  int copies = 0;
  for (const NodePlacement& p : s.placement()) copies += p.domain == "ai.onyx";
  EXPECT_EQ(copies, 1);  // x to the device; nothing back for Shape, nothing for the shape
  std::vector<float> xs(12);
  for (int i = 0; i < 12; ++i) xs[i] = static_cast<float>(i % 5) - 2;
  auto out = s.run({{"x", Tensor::from_vector<float>({2, 3, 2}, xs)}});
  EXPECT_EQ(out.at("y").shape(), (Shape{2, 6}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out.at("y").data<float>()[i], std::max(xs[i], 0.0f));
}

TEST(Partition, UnsupportedDtypeFallsBackAndOutputsCanStayOnTheDevice) {
  ModelBuilder b(17);
  b.input("i", DataType::Int64, Shape{3});
  b.input("x", DataType::Float, Shape{3});
  b.node("Add", {"i", "i"}, {"j"});  // testdev has float Add only
  b.node("Relu", {"x"}, {"y"});
  b.output("j");
  b.output("y");
  Session s(b.build(), on_testdev());
  auto m = by_op(s);
  EXPECT_EQ(m.at("Add").provider, "cpu");
  EXPECT_TRUE(m.at("Add").fallback);
  RunOptions ro;
  ro.outputs_on_device = true;
  auto out = s.run({{"i", Tensor::from_vector<int64_t>({3}, {1, 2, 3})},
                    {"x", Tensor::from_vector<float>({3}, {-1, 0, 5})}},
                   {}, ro);
  EXPECT_EQ(out.at("y").device(), kTestDevice);
  EXPECT_EQ(out.at("j").device(), Device{});
  EXPECT_EQ(out.at("j").to_int64_vector(), (std::vector<int64_t>{2, 4, 6}));
  // A device tensor fed back as an input: the copy node moves it within the device.
  auto again = s.run({{"i", Tensor::from_vector<int64_t>({3}, {0, 0, 0})}, {"x", out.at("y")}});
  EXPECT_EQ(values(again.at("y")), (std::vector<float>{0, 0, 5}));
}

TEST(Partition, SubgraphReadsKeepTheirProducersOnTheHost) {
  // An If whose branches read `a` (computed by Add) from the enclosing graph.
  auto branch = [](const std::string& name, const std::string& op) {
    auto g = std::make_shared<Graph>(name);
    Value* out = g->get_or_add_value(name + "_out");
    g->add_node(op, {g->get_or_add_value("a")}, {out}, "", name + "_node");
    g->outputs.push_back(out);
    return g;
  };
  ModelBuilder b(17);
  b.input("c", DataType::Bool, Shape{});
  b.input("x", DataType::Float, Shape{3});
  b.node("Add", {"x", "x"}, {"a"});
  Node& n = b.node("If", {"c"}, {"y"});
  for (auto [name, op] : {std::pair{"then_branch", "Relu"}, std::pair{"else_branch", "Neg"}}) {
    Attribute a;
    a.name = name;
    a.type = Attribute::Type::Graph;
    a.g = branch(name, op);
    n.attrs[name] = a;
  }
  b.output("y");
  auto model = b.build();
  Graph& g = *model->graph;
  for (const auto& node : g.nodes())
    if (node->op_type == "If") g.add_implicit_input(node.get(), g.find_value("a"));
  Session s(std::move(model), on_testdev());
  auto m = by_op(s);
  EXPECT_EQ(m.at("Add").provider, "cpu");
  EXPECT_EQ(m.at("If").provider, "cpu");
  auto out = s.run({{"c", Tensor::scalar<bool>(false)}, {"x", Tensor::from_vector<float>({3}, {1, -2, 3})}});
  EXPECT_EQ(values(out.at("y")), (std::vector<float>{-2, 4, -6}));
}

TEST(Partition, ConcurrentRunsEachGetTheirResources) {
  Session s(chain_model(), on_testdev());
  Session cpu(chain_model(), {.intra_op_threads = 1});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        Tensor x = Tensor::from_vector<float>({2, 3}, {float(t), float(i), -1, 2, 0, float(t * i)});
        if (values(s.run({{"x", x}}).at("y")) != values(cpu.run({{"x", x}}).at("y"))) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Partition, ProviderListErrors) {
  auto expect_error = [](SessionOptions o, const std::string& what) {
    try {
      Session s(chain_model(), o);
      FAIL() << "expected an error containing: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  SessionOptions o;
  o.providers = {"tpu"};
  expect_error(o, "unknown execution provider 'tpu'");
  o.providers = {"cpu", "cpu"};
  expect_error(o, "listed twice");
  o.providers = {"cuda", "cpu"};
  o.device_id = 64;
  expect_error(o, "no CUDA device");
  // The failed sessions left the process usable.
  Session ok(chain_model(), {.intra_op_threads = 1});
  EXPECT_EQ(ok.run({{"x", Tensor::from_vector<float>({2, 3}, {0, 0, 0, 0, 0, 0})}}).at("y").numel(), 6);
}

TEST(Partition, CpuAloneChangesNothing) {
  auto model = chain_model();
  const size_t nodes = model->graph->num_nodes();
  Placement p = partition_graph(*model, {make_cpu_provider()});
  EXPECT_EQ(model->graph->num_nodes(), nodes);
  for (const auto& n : model->graph->nodes()) EXPECT_EQ(p.index_of(n.get()), p.cpu_index());
}

TEST(DeviceMemory, ArenaOverABackingAllocatorAndStreamOrderedRunReuse) {
  auto backing = std::make_shared<TestDeviceMemory>();
  auto arena = std::make_shared<Arena>(backing);
  EXPECT_EQ(arena->device(), kTestDevice);
  void* a = arena->allocate(1000);
  arena->deallocate(a, 1000);
  void* b = arena->allocate(1000);
  EXPECT_EQ(a, b);  // cached, not allocated again
  EXPECT_EQ(backing->allocations.load(), 1);
  EXPECT_EQ(arena->in_use_bytes(), Arena::size_class(1000));
  arena->deallocate(b, 1000);
  EXPECT_EQ(arena->peak_reserved_bytes(), Arena::size_class(1000));
  arena->release_cached();
  EXPECT_EQ(arena->reserved_bytes(), 0u);

  // A stream-ordered run view keeps what the run frees for the run itself, and hands it back
  // to the arena only at end_run (when the stream has finished).
  RunAllocator run(arena, /*stream_ordered=*/true);
  void* p = run.allocate(4096);
  run.deallocate(p, 4096);
  EXPECT_EQ(arena->in_use_bytes(), Arena::size_class(4096));  // not back yet
  EXPECT_EQ(run.allocate(4096), p);                          // reused within the run
  run.deallocate(p, 4096);
  run.end_run();
  EXPECT_EQ(arena->in_use_bytes(), 0u);
  EXPECT_EQ(run.peak_bytes(), 4096u);
}

}  // namespace
}  // namespace onyx::test
