// Few-row float32 products by panel-packed constant weights (panel_gemm.h); the tiles are in
// the SIMD table (simd/simd_body.inc).
#include "kernels/cpu/panel_gemm.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "graph/error.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/parallel.h"

namespace onyx::cpu {

int simd_lanes(Isa isa) { return isa == Isa::Avx2 ? 8 : 16; }

bool panel_gemm_suits(int64_t rows) {
  return rows >= 2 && rows <= (simd().isa == Isa::Avx2 ? 256 : 64);
}

PanelPackedB pack_panels(const float* B, int64_t K, int64_t N, bool trans_b, int threads,
                         int lanes) {
  PanelPackedB p;
  p.K = K, p.N = N, p.lanes = lanes ? lanes : simd_lanes(simd().isa);
  if (K <= 0 || N <= 0) {  // nothing to pack (the products return before reading B)
    p.data = Tensor::empty(DataType::Float, {0});
    return p;
  }
  const int64_t wide = 2 * p.lanes, panels = p.panels();
  const int64_t last_cols = N - (panels - 1) * wide;
  const int64_t last_width = last_cols <= p.lanes ? p.lanes : wide;
  p.data = Tensor::empty(DataType::Float, {((panels - 1) * wide + last_width) * K});
  float* dst = p.data.data<float>();
  parallel_for(panels, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t j0 = q * wide, width = q == panels - 1 ? last_width : wide;
      const int64_t cols = std::min(wide, N - j0);
      float* panel = dst + j0 * K;
      // Row by row of the panel: each write is one contiguous row of `width` floats (column by
      // column, every write was a 4-byte store a cache line from the last, and packing
      // BERT-base's weights took longer than a run).
      for (int64_t k = 0; k < K; ++k) {
        float* out = panel + k * width;
        if (trans_b) {
          for (int64_t j = 0; j < cols; ++j) out[j] = B[(j0 + j) * K + k];
        } else {
          std::memcpy(out, B + k * N + j0, static_cast<size_t>(cols) * sizeof(float));
        }
        for (int64_t j = cols; j < width; ++j) out[j] = 0.0f;
      }
    }
  });
  return p;
}

void panel_gemm_run(int64_t M, const float* A, const PanelPackedB& b, float* C,
                    const float* bias, MatMulActivation act, int threads) {
  const SimdTable& t = simd();
  if (simd_lanes(t.isa) != b.lanes)
    throw Error("panel_gemm: B was packed for " + std::to_string(b.lanes) +
                "-lane vectors, the active ISA has " + std::to_string(simd_lanes(t.isa)));
  const int64_t panels = b.panels(), wide = 2 * b.lanes, N = b.N, K = b.K;
  const float* bp = b.data.data<float>();
  const bool relu = act == MatMulActivation::Relu;
  const bool gelu = act == MatMulActivation::Gelu || act == MatMulActivation::GeluTanh;
  const UnaryF32 gelu_op =
      act == MatMulActivation::Gelu ? UnaryF32::GeluErf : UnaryF32::GeluTanh;
  parallel_for(panels, threads, 1, [&](int64_t p0, int64_t p1) {
    t.panel_gemm(M, N, K, A, K, bp, p0, p1, C, N, bias, relu);
    if (!gelu) return;
    const int64_t j0 = p0 * wide, j1 = std::min(N, p1 * wide);
    for (int64_t i = 0; i < M; ++i) t.unary(gelu_op, C + i * N + j0, C + i * N + j0, j1 - j0);
  });
}

const PanelPackedB& PanelWeights::get(const Tensor& B, bool trans_b, int threads) const {
  std::lock_guard<std::mutex> lock(mu_);
  ahead_ = false;
  if (!packed_) {
    const int64_t K = B.shape()[trans_b ? 1 : 0], N = B.shape()[trans_b ? 0 : 1];
    packed_ = pack_panels(B.data<float>(), K, N, trans_b, threads);
  }
  return *packed_;
}

size_t PanelWeights::make_ahead(const Tensor& B, bool trans_b, int threads) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (packed_) return 0;
  const int64_t K = B.shape()[trans_b ? 1 : 0], N = B.shape()[trans_b ? 0 : 1];
  packed_ = pack_panels(B.data<float>(), K, N, trans_b, threads);
  ahead_ = true;
  return packed_->data.nbytes();
}

void PanelWeights::drop_unread_ahead() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ahead_) packed_.reset(), ahead_ = false;
}

}  // namespace onyx::cpu
