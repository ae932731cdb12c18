// MatMulInteger through oneDNN's int8 matmul where the CPU computes it exactly: the products
// that onnxruntime.quantization.quantize_dynamic writes (DynamicQuantizeLinear's uint8
// activations times int8 weights) run ~15x faster than a loop of int32 multiply-adds.
#pragma once

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/int8_util.h"

namespace onyx::cpu {

/// One MatMulInteger node's oneDNN primitives, cached by shape.
class Int8MatMul {
 public:
  /// `constant_b`: B when it is an initializer, which is then reordered once into the layout
  /// the primitive reads (with oneDNN's zero-point compensation) instead of on every call.
  explicit Int8MatMul(const Tensor* constant_b = nullptr);

  /// Y = (A - a_zp) @ B as int32 for A uint8/int8 of rank >= 2, B int8 [K, N] shared by every
  /// row, a_zp absent or one value, b_zp absent or all zero. Returns false (Y untouched) where
  /// these do not hold or oneDNN has no fast kernel; Y is allocated [A's dims but last, N].
  /// With `into` (int32, A's dims but last and N), Y is written there instead.
  bool run(KernelContext& ctx, const Tensor& A, const Tensor* a_zp, const Tensor& B,
           const Tensor* b_zp, Tensor* into = nullptr) const;

 private:
  struct Entry {
    dnnl_util::Prim prim;
    dnnl::memory::desc a, b, b_p, c, zp;
    std::optional<dnnl_util::Prim> b_r;  // plain B -> b_p, for a constant B
    bool ok = false;
  };
  /// The constant B's column sums (computed once), for a zero point applied after the product.
  const std::vector<int32_t>& column_sums() const;

  std::optional<Tensor> b_const_;
  mutable std::once_flag sums_once_;
  mutable std::vector<int32_t> col_sums_;
  dnnl_util::PrimitiveCache<Entry> cache_;
  PackedInt8Weights packed_;
};

}  // namespace onyx::cpu
