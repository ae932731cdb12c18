// MatMulInteger through oneDNN's int8 matmul where the CPU computes it exactly: the products
// that onnxruntime.quantization.quantize_dynamic writes (DynamicQuantizeLinear's uint8
// activations times int8 weights) run ~15x faster than a loop of int32 multiply-adds.
#pragma once

#include "kernels/cpu/dnnl_util.h"

namespace onyx::cpu {

/// True when oneDNN's int8 kernels give exact int32 sums here: with AVX-512 VNNI (vpdpbusd
/// adds u8 x s8 products in int32). Without it oneDNN pairs products in saturating int16
/// (vpmaddubsw), whose results differ from ONNX's for large values, so callers keep their own
/// loops. False too when ONYX_ISA caps oneDNN below its VNNI kernels (avx512, avx2).
bool exact_int8_dot_products();

/// One MatMulInteger node's oneDNN primitives, cached by shape.
class Int8MatMul {
 public:
  /// Y = (A - a_zp) @ B as int32 for A uint8/int8 of rank >= 2, B int8 [K, N] shared by every
  /// row, a_zp absent or one value, b_zp absent or all zero. Returns false (Y untouched) where
  /// these do not hold or oneDNN has no fast kernel; Y is allocated [A's dims but last, N].
  bool run(KernelContext& ctx, const Tensor& A, const Tensor* a_zp, const Tensor& B,
           const Tensor* b_zp) const;

 private:
  struct Entry {
    dnnl_util::Prim prim;
    dnnl::memory::desc a, b, c, zp;
    bool ok = false;
  };
  dnnl_util::PrimitiveCache<Entry> cache_;
};

}  // namespace onyx::cpu
