// Kernels prepared at session creation (Kernel::prepare, SessionOptions::prepack_weights): the
// executor prepares each kernel with a constant input once, on worker threads, and reports a
// failing prepare as the session's error; matrix products and convolutions whose weights were
// packed ahead give the bits they give when packed in the first run, for every row count or
// batch a run brings.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <thread>

#include "graph/shape_inference.h"
#include "inference/executor.h"
#include "inference/partition.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/panel_gemm.h"
#include "kernels/provider.h"
#include "test_util.h"

namespace onyx::test {
namespace {

/// What the probe kernels saw of prepare().
struct PrepareLog {
  std::mutex mu;
  std::multiset<std::string> prepared;  // node labels, once per call
  std::set<int> threads_args;
  std::set<std::thread::id> callers;
  enum class Fail { None, Error, OutOfMemory } fail = Fail::None;
};
PrepareLog* g_log = nullptr;

/// CPU's Mul with a prepare() that records its calls (or fails as asked).
class ProbeKernel final : public Kernel {
 public:
  ProbeKernel(std::unique_ptr<Kernel> inner, std::string label)
      : inner_(std::move(inner)), label_(std::move(label)) {}
  void compute(KernelContext& ctx) const override { inner_->compute(ctx); }
  size_t prepare(int threads) override {
    {
      std::lock_guard<std::mutex> lock(g_log->mu);
      g_log->prepared.insert(label_);
      g_log->threads_args.insert(threads);
      g_log->callers.insert(std::this_thread::get_id());
    }
    if (g_log->fail == PrepareLog::Fail::Error) ONYX_THROW("[{}] probe prepare failed", label_);
    if (g_log->fail == PrepareLog::Fail::OutOfMemory) throw std::bad_alloc();
    return 100;
  }

 private:
  std::unique_ptr<Kernel> inner_;
  std::string label_;
};

KernelRegistry probe_registry() {
  KernelRegistry r;
  for (const KernelDef& d : cpu_kernel_registry().defs()) {
    if (!d.domain.empty() || (d.op_type != "Mul" && d.op_type != "Relu")) continue;
    KernelDef t = d;
    t.provider = "prepprobe";
    t.create = [cpu = d.create](const KernelInfo& info) -> std::unique_ptr<Kernel> {
      return std::make_unique<ProbeKernel>(cpu(info), info.label());
    };
    r.add(std::move(t));
  }
  return r;
}

class ProbeProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return "prepprobe"; }
  Device device() const override { return Device{}; }
  std::shared_ptr<Allocator> allocator() const override { return cpu_allocator(); }
  const KernelRegistry& registry() const override {
    static const KernelRegistry r = probe_registry();
    return r;
  }
  void copy(const Tensor& src, Tensor& dst, RunResources*) const override {
    if (src.nbytes()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }
};

/// y = Relu(Mul(Mul(x, small), big)) with every node on the probe provider; a plan compiled.
std::unique_ptr<Plan> probe_plan(std::unique_ptr<Model>& model) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{4, 256});
  b.initializer("small", randn({256}, 1));
  b.initializer("big", randn({4, 256}, 2));
  b.node("Mul", {"x", "small"}, {"a"});
  b.node("Mul", {"a", "big"}, {"m"});
  b.node("Relu", {"m"}, {"y"});
  b.output("y");
  model = b.build();
  Placement placement;
  placement.providers = {std::make_shared<ProbeProvider>(), make_cpu_provider()};
  for (const auto& n : model->graph->nodes()) placement.provider_of[n.get()] = 0;
  return compile_plan(*model->graph, *model, placement);
}

TEST(PrepareKernels, EachKernelWithAConstantInputIsPreparedOnceWithOneThread) {
  PrepareLog log;
  g_log = &log;
  std::unique_ptr<Model> model;
  auto plan = probe_plan(model);
  EXPECT_TRUE(log.prepared.empty()) << "compile_plan alone prepares nothing";
  EXPECT_EQ(prepare_kernels(*plan), 200u);  // the bytes each prepare kept, summed
  // The two Mul nodes read an initializer; Relu reads none and is left alone.
  EXPECT_EQ(log.prepared, (std::multiset<std::string>{"Mul node 'Mul_0'", "Mul node 'Mul_1'"}));
  EXPECT_EQ(log.threads_args, std::set<int>{1});
  EXPECT_LE(log.callers.size(), std::max(1u, std::thread::hardware_concurrency()));
  // The plan runs as before.
  RunContext rc;
  rc.allocator = cpu_allocator();
  auto out = execute_plan(*plan, {Datum(randn({4, 256}, 3))}, nullptr, rc);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tensor.shape(), (Shape{4, 256}));
  g_log = nullptr;
}

TEST(PrepareKernels, AFailingPrepareIsTheErrorOfTheCall) {
  PrepareLog log;
  g_log = &log;
  std::unique_ptr<Model> model;
  log.fail = PrepareLog::Fail::Error;
  auto plan = probe_plan(model);
  expect_error([&] { prepare_kernels(*plan); }, "probe prepare failed");
  log.fail = PrepareLog::Fail::OutOfMemory;
  plan = probe_plan(model);
  // Out of memory names the node and the bytes of its weights (4 x 256 floats, the larger first).
  expect_error([&] { prepare_kernels(*plan); }, "out of memory packing its");
  log.fail = PrepareLog::Fail::None;
  plan = probe_plan(model);
  prepare_kernels(*plan);  // nothing stuck from the failed calls
  EXPECT_EQ(log.prepared.count("Mul node 'Mul_1'"), 3u);
  g_log = nullptr;
}

TEST(Prepack, ConstantWeightsOfProductsArePackedAtCreationWhereOneDnnPacksThem) {
  // One MatMul of A's rows by a constant [64, 48]: packed ahead where oneDNN's float32 matmul
  // takes a blocked layout (AVX-512: 64 x 48 padded to 64 x 64 floats), not where it reads the
  // weights as stored, and only where A's declared shape rules out one row: a product that may
  // have one row reads the weights as stored (gemv_f32), and its first run with more rows packs.
  struct Case {
    SymShape a;
    bool packed;  // where oneDNN takes a blocked layout
  };
  const Dim batch = Dim::symbol("batch");
  for (const Case& c : {Case{{batch, Dim::fixed(64)}, false},
                        Case{{Dim::fixed(1), Dim::fixed(64)}, false},
                        Case{{batch, Dim::fixed(1), Dim::fixed(64)}, false},
                        Case{{batch, Dim::fixed(3), Dim::fixed(64)}, true},
                        Case{{Dim::fixed(4), Dim::fixed(64)}, true},
                        Case{{Dim::fixed(2), batch, Dim::fixed(64)}, true}}) {
    ModelBuilder b(17);
    b.input("x", DataType::Float, c.a);
    b.initializer("w", randn({64, 48}, 1));
    b.node("MatMul", {"x", "w"}, {"y"});
    b.output("y");
    auto model = b.build();
    Placement placement = partition_graph(*model, {make_cpu_provider()});
    auto plan = compile_plan(*model->graph, *model, placement);
    const size_t bytes = prepare_kernels(*plan);
    // What oneDNN asks for on this CPU, asked directly.
    namespace du = cpu::dnnl_util;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({128, 64}, dt::f32, dnnl::memory::format_tag::ab),
        w({64, 48}, dt::f32, dnnl::memory::format_tag::ab),
        any({64, 48}, dt::f32, dnnl::memory::format_tag::any),
        y({128, 48}, dt::f32, dnnl::memory::format_tag::ab);
    const dnnl::memory::desc layout =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, any, y), du::engine()).weights_desc();
    // A row count that panel_gemm takes packs its panels instead (AVX-512: 32 + 16 columns, 64
    // deep): the fixed rows, or those of a batch of 1 where the batch is dynamic.
    int64_t guess = 1;
    for (size_t i = 0; i + 1 < c.a.size(); ++i) guess *= c.a[i].is_fixed() ? c.a[i].value : 1;
    if (c.packed && cpu::panel_gemm_suits(guess)) {
      const Tensor wt = randn({64, 48}, 1);
      EXPECT_EQ(bytes, cpu::pack_panels(wt.data<float>(), 64, 48, false, 1).data.nbytes())
          << sym_shape_str(c.a);
    } else if (!c.packed || layout == w)
      EXPECT_EQ(bytes, 0u) << sym_shape_str(c.a);
    else
      EXPECT_EQ(bytes, layout.get_size()) << sym_shape_str(c.a);
  }
}

/// Products of every kind the CPU packs weights for, with A's rows dynamic ("batch") or fixed.
void products(ModelBuilder& b) {
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(7), Dim::fixed(64)});
  b.input("r", DataType::Float, SymShape{Dim::symbol("rows"), Dim::fixed(64)});
  b.input("s", DataType::Float, Shape{5, 64});
  b.initializer("w", randn({64, 48}, 11, 0.2));
  b.initializer("wt", randn({40, 64}, 12, 0.2));
  b.initializer("bias", randn({48}, 13));
  b.initializer("c", randn({40}, 14));
  b.node("MatMul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "bias"}, {"xwb"});
  b.node("Relu", {"xwb"}, {"y_fused"});  // FusedMatMulBias with a ReLU epilogue at opt level all
  b.node("MatMul", {"x", "w"}, {"y_matmul"});
  Node& g = b.node("Gemm", {"r", "wt", "c"}, {"y_gemm"});
  g.attrs["transB"] = attr_int("transB", 1);
  g.attrs["alpha"] = attr_float("alpha", 0.5);
  Node& gs = b.node("Gemm", {"s", "wt"}, {"y_gemm_static"});
  gs.attrs["transB"] = attr_int("transB", 1);
  for (const char* o : {"y_fused", "y_matmul", "y_gemm", "y_gemm_static"}) b.output(o);
}

void expect_same_bits(const NamedTensors& a, const NamedTensors& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << what << ": " << name;
    ASSERT_EQ(t.dtype(), u.dtype()) << what << ": " << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.nbytes()), 0)
        << what << ": " << name << " differs between weights packed ahead and in the first run";
  }
}

TEST(Prepack, ProductsGiveTheSameBitsWithWeightsPackedAheadOrInTheFirstRun) {
  for (Precision p : {Precision::Float32, Precision::BFloat16}) {
    for (int threads : {1, 2}) {
      auto session = [&](bool prepack) {
        ModelBuilder b(17);
        products(b);
        SessionOptions so;
        so.intra_op_threads = threads;
        so.precision = p;
        so.prepack_weights = prepack;
        return b.session(so);
      };
      // x ([batch, 7, 64]) and s ([5, 64]) are packed ahead, r ([rows, 64], may be one row)
      // by its first run of more rows; a run of one row reads r's weights as stored, before or
      // after its pack exists.
      for (const std::vector<int64_t>& rows : {std::vector<int64_t>{5, 1, 3, 1}, {1, 5, 3, 1}}) {
        Session ahead = session(true), lazy = session(false);
        for (int64_t n : rows) {
          NamedTensors feeds{{"x", randn({n, 7, 64}, 20 + n)},
                             {"r", randn({n, 64}, 30 + n)},
                             {"s", randn({5, 64}, 40)}};
          expect_same_bits(ahead.run(feeds), lazy.run(feeds),
                           fmt::format("{} threads, {} rows (first {}), precision {}", threads, n,
                                       rows[0], static_cast<int>(p)));
        }
      }
    }
  }
}

TEST(Prepack, ResultsMatchTheUnoptimizedGraph) {
  // Packed ahead, the products still compute x W: against opt level none (no fusion, reference
  // rounding aside) on a dynamic batch of 4.
  auto at = [](OptLevel level) {
    ModelBuilder b(17);
    products(b);
    SessionOptions so;
    so.opt_level = level;
    return b.session(so);
  };
  Session opt = at(OptLevel::All), plain = at(OptLevel::None);
  NamedTensors feeds{{"x", randn({4, 7, 64}, 50)}, {"r", randn({6, 64}, 51)}, {"s", randn({5, 64}, 52)}};
  NamedTensors a = opt.run(feeds), b = plain.run(feeds);
  for (const auto& [name, t] : a) expect_near(t, values(b.at(name)), 1e-4);
}

/// Convolutions of every layout the optimizer gives them: a stride-2 stem 3 -> 16 reading plain
/// NCHW, two 3x3 stride-1 16 -> 16 with a residual (Winograd where the CPU has it), a 1x1
/// stride-2 16 -> 32; the batch dynamic, or also the height and width.
void convs(ModelBuilder& b, bool dynamic_spatial) {
  const Dim hw = dynamic_spatial ? Dim::symbol("hw") : Dim::fixed(20);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(3), hw, hw});
  add_conv(b, "x", "stem", 3, 16, 3, 10, 2);
  b.node("Relu", {"stem"}, {"stem_r"});
  add_conv(b, "stem_r", "a", 16, 16, 3, 20);
  b.node("Relu", {"a"}, {"a_r"});
  add_conv(b, "a_r", "b", 16, 16, 3, 30);
  b.node("Add", {"b", "stem_r"}, {"res"});
  b.node("Relu", {"res"}, {"res_r"});
  add_conv(b, "res_r", "down", 16, 32, 1, 40, 2);
  b.output("down");
}

TEST(Prepack, ConvolutionsGiveTheSameBitsWithWeightsPackedAheadOrInTheFirstRun) {
  for (OptLevel level : {OptLevel::Basic, OptLevel::All}) {
    for (bool dynamic_spatial : {false, true}) {
      auto session = [&](bool prepack) {
        ModelBuilder b(17);
        convs(b, dynamic_spatial);
        SessionOptions so;
        so.opt_level = level;
        so.prepack_weights = prepack;
        return b.session(so);
      };
      Session ahead = session(true), lazy = session(false);
      // Batch 1 (what prepare packs for), then 3 (another entry, the same packed weights).
      for (int64_t n : {1, 3, 1}) {
        NamedTensors feeds{{"x", randn({n, 3, 20, 20}, 60 + n)}};
        expect_same_bits(ahead.run(feeds), lazy.run(feeds),
                         fmt::format("opt level {}, {}, batch {}", static_cast<int>(level),
                                     dynamic_spatial ? "dynamic size" : "20 x 20", n));
      }
    }
  }
}

TEST(Prepack, ConvolutionWeightsArePackedAtCreationWhenXsShapeIsKnownButTheBatch) {
  // Plain Conv kernels (opt level basic) take oneDNN's blocked weight layouts on every ISA, so
  // all four are packed at creation for a dynamic batch; nothing when the size is unknown too.
  for (bool dynamic_spatial : {false, true}) {
    ModelBuilder b(17);
    convs(b, dynamic_spatial);
    auto model = b.build();
    infer_types_and_shapes(*model);  // as a session does before compiling its plan
    Placement placement = partition_graph(*model, {make_cpu_provider()});
    auto plan = compile_plan(*model->graph, *model, placement);
    const size_t bytes = prepare_kernels(*plan);
    const size_t weights = (16 * 3 * 9 + 16 * 16 * 9 * 2 + 32 * 16) * sizeof(float);
    if (dynamic_spatial)
      EXPECT_EQ(bytes, 0u);
    else
      EXPECT_GE(bytes, weights);
  }
}

TEST(Prepack, DeclaredShapesNoTensorCouldHaveLeaveCreationToTheRun) {
  // A malformed model declares A with 2^80 rows and X 2^40 x 2^40: creation packs nothing for
  // them (no overflow, no oneDNN call on such sizes) and a run is refused by the input check.
  const int64_t huge = int64_t{1} << 40;
  ModelBuilder b(17);
  b.input("a", DataType::Float, Shape{huge, huge, 64});
  b.input("x", DataType::Float, Shape{1, 3, huge, huge});
  b.initializer("w", randn({64, 48}, 1));
  b.node("MatMul", {"a", "w"}, {"y"});
  add_conv(b, "x", "c", 3, 16, 3, 2);
  b.output("y");
  b.output("c");
  Session s = b.session();
  expect_error([&] { s.run({{"a", randn({2, 2, 64}, 3)}, {"x", randn({1, 3, 8, 8}, 4)}}); },
               "expects shape");
}

}  // namespace
}  // namespace onyx::test
