// Our own Winograd convolution, F(2x2, 3x3) and F(4x4, 3x3), on 8-channel blocked float32
// tensors (nChw8c): the Winograd kernel of CPUs where oneDNN 2.6 has none (AVX2; its Winograd
// kernels need AVX-512). A 3x3 stride-1 convolution is 2.25x (F(2x2)) or 4x (F(4x4)) fewer
// multiplications this way; on an AVX2-only EPYC oneDNN's direct kernel already runs these at
// ~85 % of the core's FMA rate, so nothing else could take ResNet-18 below ONNX Runtime's time
// there (bench/README.md).
//
// The image is cut into (m+2)x(m+2) input tiles m pixels apart (m = 2 or 4). For a chunk of
// tiles, each tile's 8-channel vectors are transformed (V = B^T d B), then for each of the
// (m+2)^2 Winograd points a product V[point] (tiles x C) x U[point] (C x M) runs on a 6 x 16
// register tile, 16 output channels at a time, and the m x m outputs (Y = A^T P A) get bias,
// residual Z and the activation before they are stored.
#pragma once

#include <cstdint>

#include "kernels/cpu/conv.h"

namespace onyx::cpu {

/// Whether winograd_conv runs geometry `g`: 2-D, 3x3, stride 1, no dilation, one group, output
/// channels a multiple of 8.
bool winograd_suits(const Geometry& g);

/// The output tile (2 or 4) for `g`: F(4x4, 3x3) where the batch holds enough 4x4 tiles to pay
/// for its 2.25x larger transformed weights, else F(2x2, 3x3).
int winograd_tile(const Geometry& g);

/// Floats of the transformed weights of an M x C x 3 x 3 convolution for output tile `tile`:
/// (tile + 2)^2 x M x ceil(C/8)*8.
int64_t winograd_weights_numel(int tile, int64_t M, int64_t C);

/// U = G w G^T for every (output, input) channel pair of `w` (OIHW, M x C x 3 x 3, M a
/// multiple of 8) into `u` (winograd_weights_numel floats), laid out for winograd_conv: per
/// Winograd point, panels of 16 output channels (the last may be 8), each ceil(C/8)*8 input
/// channels deep, zero past C. On at most `threads` threads.
void winograd_pack_weights(int tile, const float* w, int64_t M, int64_t C, float* u,
                           int threads);

/// Floats of scratch winograd_conv needs on `threads` threads.
int64_t winograd_scratch_numel(int tile, const Geometry& g, int threads);

/// Y = act(conv(X, W) + B + Z) for `g` (winograd_suits), X blocked [N, ceil(C/8), H, W, 8]
/// (channels past C zero), Y and Z [N, M/8, OH, OW, 8]; `u` from winograd_pack_weights with the
/// same tile, `bias` [M] and `z` may be null; `scratch` holds winograd_scratch_numel floats.
void winograd_conv(int tile, const Geometry& g, const float* x, const float* u,
                   const float* bias, const float* z, float* y, const Activation& act,
                   float* scratch, int threads);

}  // namespace onyx::cpu
