// Host-side parts of the elementwise ops that every provider shares: opset < 7's legacy
// broadcast and the checks of the operands beside X (Clip's bounds, FastGelu's bias), with
// the same onyx::Error messages on the CPU and on a device.
#pragma once

#include "kernels/kernel.h"

namespace onyx {

/// Opset < 7 `broadcast=1, axis=k`: B's dimensions line up with A's starting at k.
class LegacyBroadcast {
 public:
  explicit LegacyBroadcast(const KernelInfo& info);
  /// B as a view that broadcasts onto A the numpy way (B itself when the attribute is off).
  Tensor apply(const KernelContext& ctx, const Tensor& a, const Tensor& b) const;

 private:
  bool on_;
  int64_t axis_;
};

/// BitShift's direction: true for LEFT, false for RIGHT; onyx::Error otherwise.
bool parse_shift_left(const KernelInfo& info);

/// Clip's optional min (input 1) and max (input 2): scalars of x's dtype.
void check_clip_bounds(const KernelContext& ctx, const Tensor& x, const Tensor* lo,
                       const Tensor* hi);

/// com.microsoft FastGelu's bias: 1-D, x's dtype, as long as x's last axis.
void check_fast_gelu_bias(const KernelContext& ctx, const Tensor& x, const Tensor& bias);

}  // namespace onyx
