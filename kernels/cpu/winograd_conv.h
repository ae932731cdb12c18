// Our own Winograd convolution, F(2x2, 3x3), on 8-channel blocked float32 tensors (nChw8c):
// the Winograd kernel of CPUs where oneDNN 2.6 has none (AVX2; its Winograd kernels need
// AVX-512). A 3x3 stride-1 convolution is 2.25x fewer multiplications this way; on an
// AVX2-only EPYC oneDNN's direct kernel already runs these at ~85 % of the core's FMA rate,
// so no other change could take ResNet-18 below ONNX Runtime's time there (bench/README.md).
//
// The image is cut into 4x4 input tiles two pixels apart. For a chunk of tiles (sized so its
// transformed inputs stay in L2), each tile's 8-channel vectors are transformed (V = B^T d B),
// then for each of the 16 Winograd points a product V[point] (tiles x C) x U[point] (C x M)
// runs on a 6 x 16 register tile, 16 output channels at a time, and the 2x2 outputs
// (Y = A^T m A) get bias, residual Z and the activation before they are stored.
#pragma once

#include <cstdint>

#include "graph/tensor.h"
#include "kernels/cpu/conv.h"

namespace onyx::cpu {

/// Whether winograd_f2_conv runs geometry `g`: 2-D, 3x3, stride 1, no dilation, one group,
/// output channels a multiple of 8.
bool winograd_f2_suits(const Geometry& g);

/// Floats of the transformed weights of an M x C x 3 x 3 convolution: 16 x M x ceil(C/8)*8.
int64_t winograd_f2_weights_numel(int64_t M, int64_t C);

/// U = G w G^T for every (output, input) channel pair of `w` (OIHW, M x C x 3 x 3, M a
/// multiple of 8) into `u` (winograd_f2_weights_numel floats), laid out for winograd_f2_conv:
/// per Winograd point, panels of 16 output channels (the last may be 8), each ceil(C/8)*8
/// input channels deep, zero past C. On at most `threads` threads.
void winograd_f2_pack_weights(const float* w, int64_t M, int64_t C, float* u, int threads);

/// Floats of scratch winograd_f2_conv needs on `threads` threads.
int64_t winograd_f2_scratch_numel(const Geometry& g, int threads);

/// Y = act(conv(X, W) + B + Z) for `g` (winograd_f2_suits), X blocked [N, ceil(C/8), H, W, 8]
/// (channels past C zero), Y and Z [N, M/8, OH, OW, 8]; `u` from winograd_f2_pack_weights,
/// `bias` [M] and `z` may be null; `scratch` holds winograd_f2_scratch_numel floats.
void winograd_f2_conv(const Geometry& g, const float* x, const float* u, const float* bias,
                      const float* z, float* y, const Activation& act, float* scratch,
                      int threads);

}  // namespace onyx::cpu
