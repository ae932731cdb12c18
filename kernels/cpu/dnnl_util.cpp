#include "kernels/cpu/dnnl_util.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>

#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/isa.h"
#include "kernels/parallel.h"

namespace onyx::cpu::dnnl_util {

const dnnl::engine& engine() {
  // active_isa() first: a lowered ONYX_ISA caps oneDNN's ISA before its first JIT kernel.
  static const dnnl::engine eng = (active_isa(), dnnl::engine(dnnl::engine::kind::cpu, 0));
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

bool has_dnnl_type(DataType dt) {
  switch (dt) {
    case DataType::Float:
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Int32:
      return true;
    default:
      return false;
  }
}

dnnl::memory::data_type to_dnnl(DataType dt) {
  using dt_t = dnnl::memory::data_type;
  switch (dt) {
    case DataType::Float:
      return dt_t::f32;
    case DataType::Float16:
      return dt_t::f16;
    case DataType::BFloat16:
      return dt_t::bf16;
    case DataType::Int8:
      return dt_t::s8;
    case DataType::UInt8:
      return dt_t::u8;
    case DataType::Int32:
      return dt_t::s32;
    default:
      ONYX_THROW("[oneDNN] no oneDNN data type for {}", dtype_name(dt));
  }
}

dnnl::memory::dims to_dims(const Shape& shape) {
  if (shape.empty()) return {1};
  return dnnl::memory::dims(shape.begin(), shape.end());
}

dnnl::memory::desc plain_desc(const Shape& shape, DataType dt) {
  dnnl::memory::dims dims = to_dims(shape);
  dnnl::memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * dims[i + 1];
  return dnnl::memory::desc(dims, to_dnnl(dt), strides);
}

dnnl::memory::desc blocked_desc(const Shape& nchw, DataType dt, int64_t block) {
  ONYX_CHECK(nchw.size() == 4 && is_layout_block(block),
             "[oneDNN] blocked layouts are [N, C, H, W] with block 8, 16 or channels-last, got {} "
             "with block {}",
             shape_str(nchw), block);
  using tag = dnnl::memory::format_tag;
  return dnnl::memory::desc(to_dims(nchw), to_dnnl(dt),
                            block == 8    ? tag::nChw8c
                            : block == 16 ? tag::nChw16c
                                          : tag::nhwc);
}

dnnl::memory::desc strided_desc(const Shape& shape, DataType dt, const Shape& strides) {
  return dnnl::memory::desc(to_dims(shape), to_dnnl(dt), to_dims(strides));
}

dnnl::memory wrap(const dnnl::memory::desc& md, const void* ptr) {
  // oneDNN takes non-const handles; inputs are only read.
  return dnnl::memory(md, engine(), const_cast<void*>(ptr));
}

dnnl::primitive_attr scratch_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Prim make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, scratch_attr());
  return Prim{dnnl::reorder(pd), pd.scratchpad_desc()};
}

Tensor scratch_for(KernelContext& ctx, const dnnl::memory::desc& md) {
  return ctx.scratch(DataType::UInt8, {static_cast<int64_t>(std::max<size_t>(md.get_size(), 1))});
}

namespace {

/// Runs `p` with `scratch` as its scratchpad (when defined) on the calling thread's stream and
/// waits; a oneDNN error names ctx's node, or `who` outside a run.
void execute_with(const Prim& p, std::unordered_map<int, dnnl::memory> args, const Tensor& scratch,
                  const KernelContext* ctx, std::string_view who) {
  if (scratch.defined()) args.emplace(DNNL_ARG_SCRATCHPAD, wrap(p.scratch, scratch.raw()));
  dnnl::stream& s = stream();
  try {
    p.prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error& e) {
    ONYX_THROW("[{}] oneDNN execution failed: {}", ctx ? ctx->label() : std::string(who), e.what());
  }
}

}  // namespace

void execute(KernelContext& ctx, const Prim& p, std::unordered_map<int, dnnl::memory> args) {
  execute_with(p, std::move(args), p.scratch.get_size() > 0 ? scratch_for(ctx, p.scratch) : Tensor(),
               &ctx, {});
}

void execute(std::string_view who, const Prim& p, std::unordered_map<int, dnnl::memory> args) {
  const size_t bytes = p.scratch.get_size();
  execute_with(p, std::move(args),
               bytes > 0 ? Tensor::empty(DataType::UInt8, {static_cast<int64_t>(bytes)}) : Tensor(),
               nullptr, who);
}

ThreadScope::ThreadScope(int threads) : saved_(omp_get_max_threads()) {
  if (threads > 0 && threads != saved_) omp_set_num_threads(threads);
}
ThreadScope::~ThreadScope() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

namespace {

/// The layout ONYX_CONV_LAYOUT asks for: kChannelsLast, 16 or 8; 0 when unset or "auto".
int64_t forced_conv_layout() {
  static const int64_t block = [] {
    const char* env = std::getenv("ONYX_CONV_LAYOUT");
    const std::string_view v(env ? env : "");
    if (v == "nhwc") return kChannelsLast;
    if (v == "nchw16c") return int64_t{16};
    if (v == "nchw8c") return int64_t{8};
    if (!v.empty() && v != "auto")
      throw Error(fmt::format("ONYX_CONV_LAYOUT must be nhwc, nchw16c, nchw8c or auto, got '{}'",
                              v));
    return int64_t{0};
  }();
  return block;
}

}  // namespace

bool has_winograd_kernels() {
  active_isa();  // applies ONYX_ISA's cap before oneDNN reports its ISA
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

int64_t nchwc_block() {
  // AVX-512 is also what oneDNN's brgconv kernels for channels-last need.
  if (const int64_t forced = forced_conv_layout()) return forced;
  return has_winograd_kernels() ? kChannelsLast : int64_t{8};
}

int64_t winograd_block() {
  const int64_t forced = forced_conv_layout();
  if (has_winograd_kernels()) {
    if (forced == 0 || forced == 16) return 16;  // oneDNN's AVX-512 kernels
  } else if (forced == 0) {
    return 8;  // our own F(2x2) / F(4x4) kernel (kernels/cpu/winograd_conv.h) on 8-channel blocks
  }
  return forced == 8 ? int64_t{8} : int64_t{0};
}

bool is_reference_impl(const dnnl::primitive_desc_base& pd) {
  std::string impl = pd.impl_info_str();
  return impl.rfind("ref", 0) == 0 || impl.find("simple") != std::string::npos;
}

namespace {
std::mutex slow_mu;
std::set<std::pair<std::string, DataType>> slow_seen;  // guarded by slow_mu
}  // namespace

void note_slow_path(std::string_view op, DataType dt, std::string_view why) {
  {
    std::lock_guard<std::mutex> lock(slow_mu);
    if (!slow_seen.emplace(std::string(op), dt).second) return;
  }
  spdlog::info("[cpu] {} on {} takes a slower path: {}", op, dtype_name(dt), why);
}

bool slow_path_noted(std::string_view op, DataType dt) {
  std::lock_guard<std::mutex> lock(slow_mu);
  return slow_seen.count({std::string(op), dt}) > 0;
}

LowPrecisionGap low_precision_gap(DataType dt) {
  if (dt != DataType::BFloat16) return LowPrecisionGap::None;
  const Isa isa = active_isa();
  if (isa == Isa::Avx512) return LowPrecisionGap::Emulated;
  static const bool native_asked = [] {
    const char* env = std::getenv("ONYX_BF16_NATIVE");
    return env && std::string_view(env) == "1";
  }();
  if (isa == Isa::Avx512Bf16 && intel_cpu() && !native_asked) return LowPrecisionGap::NoFaster;
  return LowPrecisionGap::None;
}

std::string float32_fallback_why(std::string_view primitive, DataType dt, LowPrecisionGap gap) {
  if (gap == LowPrecisionGap::NoFaster)
    return fmt::format(
        "an Intel CPU without AMX runs {} dot products at half float32's rate (ISA {}); the "
        "inputs are converted to float32 for the float32 {} and the result rounded back "
        "(ONYX_BF16_NATIVE=1 keeps oneDNN's native kernels)",
        dtype_name(dt), isa_name(active_isa()), primitive);
  const char* has = gap == LowPrecisionGap::Emulated    ? "only an emulated (4.5x slower)"
                    : gap == LowPrecisionGap::Reference ? "only a reference (slow)"
                                                        : "no";
  return fmt::format(
      "oneDNN {}.{} has {} {} {} at ISA {}; its inputs are converted to float32 for the "
      "float32 primitive and the result rounded back",
      DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, has, dtype_name(dt), primitive,
      isa_name(active_isa()));
}

Tensor to_float32(KernelContext& ctx, const Tensor& t) {
  if (t.dtype() == DataType::Float) return t;
  Tensor out = ctx.scratch(DataType::Float, t.shape());
  float* o = out.data<float>();
  int64_t n = t.numel();
  auto run = [&]<typename T>() {
    const T* in = t.data<T>();
    parallel_for(n, ctx.threads(), 1 << 15, [&](int64_t b, int64_t e) {
      if constexpr (is_half_v<T>)
        widen(in + b, o + b, e - b);
      else
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<float>(in[i]);
    });
  };
  if (t.dtype() == DataType::Float16)
    run.template operator()<float16>();
  else if (t.dtype() == DataType::BFloat16)
    run.template operator()<bfloat16>();
  else if (t.dtype() == DataType::Double)
    run.template operator()<double>();
  else
    ONYX_THROW("[oneDNN] cannot convert {} to float", dtype_name(t.dtype()));
  return out;
}

void from_float32(const Tensor& src, Tensor& dst, int threads) {
  const float* in = src.data<float>();
  int64_t n = dst.numel();
  auto run = [&]<typename T>() {
    T* o = dst.data<T>();
    parallel_for(n, threads, 1 << 15, [&](int64_t b, int64_t e) {
      if constexpr (is_half_v<T>)
        narrow(in + b, o + b, e - b);
      else
        for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(in[i]);
    });
  };
  if (dst.dtype() == DataType::Float)
    std::memcpy(dst.raw(), in, n * sizeof(float));
  else if (dst.dtype() == DataType::Float16)
    run.template operator()<float16>();
  else if (dst.dtype() == DataType::BFloat16)
    run.template operator()<bfloat16>();
  else if (dst.dtype() == DataType::Double)
    run.template operator()<double>();
  else
    ONYX_THROW("[oneDNN] cannot convert float to {}", dtype_name(dst.dtype()));
}

}  // namespace onyx::cpu::dnnl_util
