// QLinearConv through oneDNN's int8 convolution where the CPU computes it exactly (AVX-512
// VNNI, see int8_util.h): the convolutions of int8 CNNs in the QOperator format (the ONNX
// model zoo's, onnxruntime.quantization's QOperator output). int32 sums are exact; the
// requantization is oneDNN's float one (acc * x_scale * w_scale / y_scale + y_zero_point,
// rounded half to even, saturated), as ONNX Runtime's own int8 kernels compute it.
#pragma once

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/int8_util.h"
#include "kernels/window_geometry.h"

namespace onyx::cpu {

class Int8Conv {
 public:
  /// `constant_w`: W when it is an initializer (reordered once into the primitive's layout).
  Int8Conv(const Node& node, const Tensor* constant_w);

  /// Y = QLinearConv(X, x_scale, x_zp, W, w_scale, w_zp, y_scale, y_zp, B) for a 2-D
  /// convolution of uint8/int8 X, int8 W without a zero point (or an all-zero one), per-tensor
  /// x/y scales and zero points, per-tensor or per-output-channel w_scale, int32 B. Returns
  /// false (nothing allocated) where these do not hold or oneDNN has no fast kernel.
  bool run(KernelContext& ctx) const;

 private:
  struct Entry {
    dnnl_util::Prim prim;
    dnnl::memory::desc x, x_p, w, w_p, b, y, y_p, scales, zp;
    std::optional<dnnl_util::Prim> x_r, w_r, y_r;  // plain <-> the primitive's layouts
    bool ok = false;
  };
  ConvAttrs attrs_;
  std::optional<Tensor> w_const_;
  dnnl_util::PrimitiveCache<Entry> cache_;
  PackedInt8Weights packed_;
};

}  // namespace onyx::cpu
