// What the int8 oneDNN paths (int8_matmul.h, int8_conv.h) share: whether this CPU sums int8
// products exactly, zero-point helpers, and constant weights kept in a primitive's layout.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_util.h"

namespace onyx::cpu {

/// True when oneDNN's int8 kernels give exact int32 sums here: with AVX-512 VNNI (vpdpbusd
/// adds u8 x s8 products in int32). Without it oneDNN pairs products in saturating int16
/// (vpmaddubsw), whose results differ from ONNX's for large values, so callers keep their own
/// loops. False too when ONYX_ISA caps oneDNN below its VNNI kernels (avx512, avx2).
bool exact_int8_dot_products();

/// Every element of an integer tensor is 0.
bool all_zero(const Tensor& t);

/// The value of a one-element uint8 or int8 tensor.
int32_t int8_scalar(const Tensor& t);

/// A constant weight in the layouts primitives asked for, one copy per layout (reordered
/// once, on the first run that needs it).
class PackedInt8Weights {
 public:
  /// W as a primitive with layout `packed` reads it: `reorder` (plain -> packed) run once;
  /// W itself when there is no reorder.
  Tensor get(KernelContext& ctx, const Tensor& W, const dnnl::memory::desc& plain,
             const dnnl::memory::desc& packed, const dnnl_util::Prim* reorder) const;

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<dnnl::memory::desc, Tensor>> packs_;  // guarded by mu_
};

}  // namespace onyx::cpu
