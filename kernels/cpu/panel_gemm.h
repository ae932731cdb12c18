// Products of a few rows by a constant float32 weight on our own register tiles: oneDNN 2.6's
// matmul reaches 134 GFLOP/s for 32 x 1024 x 1024 on an AVX-512 Xeon where the same machine
// does 159 at 128 rows, and a batch-32 MLP ran 1.13x ONNX Runtime's time in its three Gemms.
// B is packed once into panels of two vectors' width, K rows deep, so one R x 2-vector tile
// of accumulators streams its panel and broadcasts A: 156-162 GFLOP/s from 24 to 128 rows
// with B in cache. Weights that come from memory (a BERT-base's 340 MB, each read once per
// run) are the other case: the tile prefetches its panel 128 k-steps ahead, and a run
// through the four products of 12 such layers takes 0.86-0.93x oneDNN's time at 8 to 64
// rows (without the prefetch 1.11-1.19x); at 128 rows the two are level, so oneDNN keeps
// those (bench/README.md).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "graph/tensor.h"
#include "kernels/cpu/isa.h"
#include "kernels/matmul_shape.h"

namespace onyx::cpu {

/// B [K, N] in SimdTable::panel_gemm's layout: panels of 2 * lanes columns, each K rows of
/// its columns contiguous; a last panel of at most `lanes` real columns is `lanes` wide; the
/// columns past N are zero.
struct PanelPackedB {
  Tensor data;  // float32
  int64_t K = 0, N = 0;
  int lanes = 0;
  int64_t panels() const { return (N + 2 * lanes - 1) / (2 * lanes); }
};

/// Whether a product of `rows` rows by a packed constant B runs on panel_gemm rather than
/// oneDNN, from 2 rows (1 row is gemv_f32's) to 64 on AVX-512 (at 128 both reach the
/// machine's rate) and to 256 on AVX2, where oneDNN 2.6's matmul packs B on every call: on an
/// AVX2-only AMD EPYC (Zen 3) these tiles took half its time from 16 to 64 rows and BERT-base
/// at 128 and 256 rows 0.76x; at 512 the two were level (bench/README.md).
bool panel_gemm_suits(int64_t rows);

/// B [K, N] (stored [N, K] when `trans_b`) packed for the panel_gemm of vectors of `lanes`
/// floats (0: the active ISA's; tests pack for each table).
PanelPackedB pack_panels(const float* B, int64_t K, int64_t N, bool trans_b, int threads,
                         int lanes = 0);

/// Floats per vector of a SIMD table (8 for AVX2, 16 for AVX-512).
int simd_lanes(Isa isa);

/// C [M, N] = act(A [M, K] x B + bias) with `bias` [N] or null; the panels split over
/// `threads`. Relu is applied in the tile; the Gelu forms after it, per row.
void panel_gemm_run(int64_t M, const float* A, const PanelPackedB& b, float* C,
                    const float* bias, MatMulActivation act, int threads);

/// A kernel's constant B packed for panel_gemm once: ahead of the runs (make_ahead, from
/// Kernel::prepare) or by the first run that needs it.
class PanelWeights {
 public:
  const PanelPackedB& get(const Tensor& B, bool trans_b, int threads) const;
  /// Packs now; returns the bytes packed.
  size_t make_ahead(const Tensor& B, bool trans_b, int threads) const;
  /// Frees a pack made ahead that no run has read: prepare() guessed panel_gemm's rows (a
  /// batch of 1) and the runs take oneDNN's product, which keeps a pack of its own.
  void drop_unread_ahead() const;

 private:
  mutable std::mutex mu_;
  mutable std::optional<PanelPackedB> packed_;
  mutable bool ahead_ = false;  // packed_ made by make_ahead and not read by a run yet
};

}  // namespace onyx::cpu
