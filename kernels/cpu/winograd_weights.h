// Our own transform of 3x3 convolution weights into the Winograd layouts of oneDNN 2.6's
// AVX-512 float32 kernels (F(2x2, 3x3): wino_wei_aaOio and aaOBiOo; F(4x4, 3x3):
// wino_wei_OBaaIBOIio).
// oneDNN's reorder for them runs a generic loop through a full-size scratch copy: 65-75 ms per
// 512x512 convolution at 1 thread, most of a ResNet's first run (bench/README.md, "Winograd
// weights"). This one writes the final layout directly, vectorised over the output channels of
// a block and parallel over (output block, input block) pairs.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>

namespace onyx::cpu {

/// Whether `to` is a layout transform_winograd_weights writes (float32 aaOio or aaOBiOo with
/// alpha 4, OBaaIBOIio with alpha 6; 3x3 kernel) from plain OIHW float32 weights `from` (M x C x 3 x 3).
bool can_transform_winograd_weights(const dnnl::memory::desc& from,
                                    const dnnl::memory::desc& to);

/// U = G w G^T for every (output, input) channel pair of `w` (OIHW, M x C x 3 x 3), written in
/// `to`'s layout into `out` (to.get_size() bytes; channels past M or C padded with zeros), on
/// at most `threads` threads. What oneDNN's reorder from `from` to `to` computes, within float
/// rounding.
void transform_winograd_weights(const float* w, int64_t M, int64_t C,
                                const dnnl::memory::desc& to, float* out, int threads);

}  // namespace onyx::cpu
