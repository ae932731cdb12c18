// Shared pieces of the convolution kernels (conv.cpp, conv_nchwc.cpp): attributes, per-run
// geometry, the fused activation, our reference loops (conv_ref.cpp) and the oneDNN primitive
// with its reorders and post-ops (conv_dnnl.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <optional>

#include "kernels/cpu/dnnl_util.h"
#include "kernels/window_geometry.h"

namespace onyx::cpu {

/// ConvAttrs, conv_geometry and conv_transpose_geometry are shared with the other providers
/// (kernels/window_geometry.h).
using Geometry = ConvGeometry;

/// The activation a FusedConv applies after bias and Z: com.microsoft's `activation` string
/// with `activation_params` (alpha for LeakyRelu; min, max for Clip; alpha, beta for HardSigmoid).
struct Activation : ConvActivationParams {
  /// parse_conv_activation (kernels/window_geometry.h).
  static Activation from_node(const Node& n);
  /// The activation as oneDNN eltwise post-ops.
  void append_to(dnnl::post_ops& po) const;
  template <typename A>
  A apply(A x) const {
    switch (kind) {
      case Kind::None:
        return x;
      case Kind::Relu:
        return x > A(0) ? x : A(0);
      case Kind::LeakyRelu:
        return x >= A(0) ? x : A(alpha) * x;
      case Kind::Sigmoid:
        return A(1) / (A(1) + std::exp(-x));
      case Kind::Tanh:
        return std::tanh(x);
      case Kind::Clip:
        return std::min(std::max(x, A(alpha)), A(beta));
      case Kind::HardSigmoid:
        return std::max(A(0), std::min(A(1), A(alpha) * x + A(beta)));
    }
    return x;
  }
};

/// y[i] = act(y[i] + z[i]) over Y (z may be null), in acc_t<T>.
void conv_epilogue(Tensor& Y, const Tensor* Z, const Activation& act, int threads);
/// Y filled with its bias (or zeros) as if the convolution summed nothing; `block` > 0 for a
/// [N, M/block, spatial..., block] Y.
void conv_fill_bias(Tensor& Y, const Tensor* B, int64_t M, int64_t block);

/// Direct (transposed) convolution of plain float tensors, accumulating in acc_t<T>.
void ref_conv(const Geometry& g, const Tensor& X, const Tensor& W, const Tensor* B, Tensor& Y,
              bool transpose, int threads);
/// The same for double tensors as im2col + our blocked gemm (conv_gemm.cpp): 10x and more
/// faster than the direct loops where output rows are short (late ResNet stages, weight
/// gradients), which is where float64 gradient checks spend their time.
void gemm_conv(const Geometry& g, const Tensor& X, const Tensor& W, const Tensor* B, Tensor& Y,
               bool transpose, int threads);

/// How one tensor of a oneDNN convolution is laid out in our buffers: plain NCHW (block 0),
/// blocked [N, ceil(C/block), H, W, block] (oneDNN's nChw8c / nChw16c, padded channels zero) or
/// channels-last [N, 1, H, W, C] (dnnl_util::kChannelsLast, oneDNN's nhwc).
struct ConvLayout {
  int64_t src_block = 0, dst_block = 0;
};

/// What a oneDNN (de)convolution needs beyond its geometry.
struct ConvSpec {
  DataType dt = DataType::Float;
  bool has_bias = false, has_sum = false, transpose = false;
  /// Try oneDNN's Winograd convolution first (float32 on our blocked layout; the direct one
  /// when it has none for this geometry).
  bool winograd = false;
  Activation act;
  ConvLayout layout;
};

/// A oneDNN (de)convolution with the reorders between our layouts and its own.
struct ConvEntry {
  bool ok = false;
  bool z_binary = false;  // Z read by a binary post-op (else summed into a prefilled dst)
  DataType run_dt = DataType::Float;
  std::string why;  // why a 16-bit dtype runs in float32 (empty when it runs natively)
  std::string impl;  // oneDNN's name of the implementation ("jit_wino_4x3:avx512_core", ...)
  dnnl_util::Prim prim;
  std::optional<dnnl_util::Prim> src_r, wei_r, dst_r, sum_r;
  /// wei_p is oneDNN's Winograd layout: our transform_winograd_weights writes it, not wei_r.
  bool wino_weights = false;
  dnnl::memory::desc src_u, wei_u, dst_u, bias_u, src_p, wei_p, dst_p;
  /// Weights already in the primitive's layout, when W is a constant.
  struct Packed {
    std::mutex mu;
    Tensor w;
  };
  std::shared_ptr<Packed> packed = std::make_shared<Packed>();
};

/// A convolution kernel's constant weights in the layouts its entries read, one pack per
/// layout: entries of other batch sizes share it, and Kernel::prepare can make it before any run.
class ConvWeightPacks {
 public:
  /// The pack entry `e` reads: the one of its layout, else a new, empty one. `ahead`: asked by
  /// prepare(); a new pack asked by a run drops those made ahead that no run has asked for
  /// (prepare guessed a batch whose layout the runs do not take).
  std::shared_ptr<ConvEntry::Packed> for_entry(const ConvEntry& e, bool ahead);

 private:
  struct Slot {
    dnnl::memory::desc layout;
    bool wino;
    std::shared_ptr<ConvEntry::Packed> packed;
    bool ahead;
  };
  std::mutex mu_;
  std::vector<Slot> slots_;
};

/// Packs constant W into entry `e`'s pack unless it holds it already; returns the bytes packed.
size_t pack_constant_conv_weights(KernelContext& ctx, const ConvEntry& e, const Tensor& W);

/// Builds the entry; ok is false when oneDNN has no implementation.
ConvEntry make_conv_entry(const Geometry& g, const ConvSpec& spec);
/// Runs an entry: reorders in, (de)convolution with Z summed into the destination and the
/// activation applied, reorder out; converts 16-bit floats when the primitive runs in float32.
void run_conv_entry(KernelContext& ctx, const ConvEntry& e, const Tensor& X, const Tensor& W,
                    const Tensor* B, const Tensor* Z, Tensor& Y, bool const_weights);

enum class ConvOp { Conv, ConvTranspose, FusedConv, ConvNchwc };
/// The kernel of one convolution op. ConvNchwc (domain ai.onyx) is a 2-D Conv with FusedConv's
/// inputs and attributes whose Y and Z are blocked [N, M/block, H, W, block] (attribute `block`
/// 8 or 16) or channels-last [N, 1, H, W, M] (block -1), and whose X is laid out alike or plain.
std::unique_ptr<Kernel> make_conv_kernel(const KernelInfo& info, ConvOp op);

/// ConvNchwc, ToNchwc and FromNchwc (domain ai.onyx), the blocked-layout ops the optimizer's
/// NCHWc pass inserts (conv_nchwc.cpp).
void register_conv_nchwc_kernels(KernelRegistry& r);

}  // namespace onyx::cpu
