// oneDNN glue for the CPU kernels: the engine, per-thread streams, memory descriptors from
// Tensors, a per-kernel primitive cache keyed by shapes, and execution with scratchpads
// taken from the kernel context (so concurrent runs of one primitive never share memory).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/kernel.h"

namespace onyx::cpu::dnnl_util {

/// The process-wide CPU engine.
const dnnl::engine& engine();
/// The calling thread's stream on engine().
dnnl::stream& stream();

/// True when oneDNN has a data type for `dt` (float, float16, bfloat16, int8, uint8, int32).
bool has_dnnl_type(DataType dt);
dnnl::memory::data_type to_dnnl(DataType dt);
dnnl::memory::dims to_dims(const Shape& shape);
/// Row-major descriptor of `shape` (a scalar is described as [1]).
dnnl::memory::desc plain_desc(const Shape& shape, DataType dt);
/// Descriptor of a [N, C, H, W] tensor stored channel-blocked as [N, ceil(C/block), H, W, block]
/// (nChw8c or nChw16c; block 8 or 16) or channels-last as [N, 1, H, W, C] (nhwc; kChannelsLast).
dnnl::memory::desc blocked_desc(const Shape& nchw, DataType dt, int64_t block);
/// Descriptor with explicit strides, in elements.
dnnl::memory::desc strided_desc(const Shape& shape, DataType dt, const Shape& strides);
/// Wraps caller memory (not owned) in a dnnl::memory.
dnnl::memory wrap(const dnnl::memory::desc& md, const void* ptr);

/// Attributes with a user-managed scratchpad, which execute() supplies per run.
dnnl::primitive_attr scratch_attr();

/// A primitive with the scratchpad size it needs.
struct Prim {
  dnnl::primitive prim;
  dnnl::memory::desc scratch;
};

/// Builds a Prim of primitive type P from its primitive descriptor.
template <typename P, typename PD>
Prim make_prim(const PD& pd) {
  return Prim{P(pd), pd.scratchpad_desc()};
}
/// Reorder between two descriptors (user scratchpad).
Prim make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

/// Runs `p` on the calling thread's stream with `args` plus a scratchpad from ctx; waits.
void execute(KernelContext& ctx, const Prim& p, std::unordered_map<int, dnnl::memory> args);
/// The same outside a run (Kernel::prepare): the scratchpad comes from the heap and errors
/// name `who`.
void execute(std::string_view who, const Prim& p, std::unordered_map<int, dnnl::memory> args);

/// Sets OpenMP's thread count of the calling thread (which oneDNN uses) for a scope.
class ThreadScope {
 public:
  explicit ThreadScope(int threads);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

/// The `block` of a channels-last twin: one block holding every channel, [N, 1, H, W, C], which
/// is NHWC in memory (oneDNN's nhwc). Blocks 8 and 16 are nChw8c / nChw16c.
inline constexpr int64_t kChannelsLast = -1;

/// True for the layouts the blocked ops take: 8, 16 or kChannelsLast.
inline bool is_layout_block(int64_t block) {
  return block == 8 || block == 16 || block == kChannelsLast;
}

/// The channel block a blocked tensor of `channels` channels has in memory: `block`, or every
/// channel for kChannelsLast.
inline int64_t resolve_block(int64_t block, int64_t channels) {
  return block == kChannelsLast ? channels : block;
}

/// Channel block of the layout oneDNN's convolutions run fastest on this CPU: channels-last
/// where its effective ISA has AVX-512 (its brgconv kernels beat the nChw16c jit kernels on 3x3
/// convolutions by 8-27 % and match them on 1x1), else 8 (nChw8c; AVX2 has no brgconv).
/// ONYX_CONV_LAYOUT=nhwc|nchw16c|nchw8c overrides it for the process (bench comparisons).
int64_t nchwc_block();

/// True where oneDNN's effective ISA has AVX-512, which its float32 Winograd 3x3 kernels
/// (F(2x2,3x3) and F(4x4,3x3), on nChw16c tensors) need.
bool has_winograd_kernels();
/// Channel block of the NCHWc pass's Winograd layout: 16 with has_winograd_kernels() (oneDNN's
/// kernels), else 8 (our own, kernels/cpu/winograd_conv.h); ONYX_CONV_LAYOUT's nchw8c or
/// nchw16c picks that one's, nhwc none (0).
int64_t winograd_block();

/// True when `pd` got a reference (slow) implementation; half-float kernels then run
/// in float32 instead.
bool is_reference_impl(const dnnl::primitive_desc_base& pd);

/// Bytes of a scratch Tensor for `md` (a uint8 buffer of md.get_size()).
Tensor scratch_for(KernelContext& ctx, const dnnl::memory::desc& md);

/// Logs one spdlog::info line the first time in this process that op type `op` runs dtype `dt`
/// on a slower path (its 16-bit inputs converted to float32, or onyx's own loops), saying
/// `why`; later calls for the same (op, dt) log nothing. Thread-safe.
void note_slow_path(std::string_view op, DataType dt, std::string_view why);
/// True once note_slow_path(op, dt, ...) has been called in this process.
bool slow_path_noted(std::string_view op, DataType dt);
/// What oneDNN offers for a 16-bit dtype on the active ISA when onyx does not use it.
enum class LowPrecisionGap { None, Reference, Emulated, NoFaster };
/// Why oneDNN's `dt` products and convolutions should not run on this CPU (they then run in
/// float32 on converted inputs, as fast as float32 less one conversion), or None:
///   Emulated  bfloat16 on AVX-512 without AVX-512-BF16: oneDNN's JIT kernels widen every
///             operand and run 4.5x slower than converting once and running the float32
///             primitive (1024^3 MatMul and a 64-channel 3x3 Conv at one thread);
///   NoFaster  bfloat16 on an Intel CPU with AVX-512-BF16 but no AMX (Cooper Lake, or a VM that
///             hides AMX): its bf16 dot products issue at half the rate of its two float32 FMA
///             ports, so the same flops take as long before the conversions (Xeon model 207,
///             one thread: 128x768x768 at 84 GFLOP/s against 163 in float32; BERT-base
///             inference 279 ms native against 175 ms through float32). ONYX_BF16_NATIVE=1
///             keeps the native kernels there (tests, comparisons).
LowPrecisionGap low_precision_gap(DataType dt);
/// Why a 16-bit `primitive` ("matmul", "convolution") runs in float32 instead.
std::string float32_fallback_why(std::string_view primitive, DataType dt, LowPrecisionGap gap);

/// Converts a float16/bfloat16 tensor to a float32 scratch tensor (float32: returned as is).
Tensor to_float32(KernelContext& ctx, const Tensor& t);
/// Writes float32 `src` into `dst` of another float dtype (same element count).
void from_float32(const Tensor& src, Tensor& dst, int threads);

/// Primitives of one kernel, created once per key (shapes, dtypes, thread count).
/// Thread-safe; entries live as long as the kernel.
template <typename Entry>
class PrimitiveCache {
 public:
  using Key = std::vector<int64_t>;
  std::shared_ptr<const Entry> get(const Key& key, const std::function<Entry()>& make) const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    auto made = std::make_shared<const Entry>(make());
    std::lock_guard<std::mutex> lock(mu_);
    return map_.emplace(key, std::move(made)).first->second;
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<Key, std::shared_ptr<const Entry>> map_;
};

}  // namespace onyx::cpu::dnnl_util
