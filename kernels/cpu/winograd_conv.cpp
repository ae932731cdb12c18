#include "kernels/cpu/winograd_conv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int kPoints = 16;  // the 4x4 Winograd points of F(2x2, 3x3)
constexpr int kLanes = 8;    // channels per block and per AVX2 vector
constexpr int kPanel = 16;   // output channels per register tile (two vectors)
constexpr int kRows = 6;     // tiles per register tile: 6 x 2 accumulators + 2 weights + 1 broadcast
// Transformed inputs of one chunk of tiles (16 points x tiles x channels) stay within this many
// floats (768 KB). Every chunk reads all of U (16 MB for 512 x 512 channels), so fewer, larger
// chunks win over ones that fit L2: ResNet-18's 512@7x7 at 1 thread took 3.2 ms in two chunks
// of 384 KB, 2.1-2.5 ms in one; 64@56x56 1.5 ms either way (AVX2 EPYC).
constexpr int64_t kChunkFloats = 192 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// How a convolution is cut: tiles into chunks, output channels into panels of 16 and the
/// panels into groups, one (chunk, group) pair per work item.
struct Plan {
  int64_t C8 = 0, Cp = 0, M = 0, M8 = 0;  // input blocks, padded input channels, output channels
  int64_t TH = 0, TW = 0, T = 0;          // tiles down, across, in all (over the batch)
  int64_t TB = 0, chunks = 0;             // tiles per chunk (the last may hold fewer)
  int64_t panels = 0, mgroups = 0, items = 0;
  int workers = 1;
  int64_t worker_floats() const { return kPoints * TB * Cp + kPoints * TB * kPanel; }
};

Plan make_plan(const Geometry& g, int threads) {
  Plan p;
  p.C8 = ceil_div(g.C, kLanes);
  p.Cp = p.C8 * kLanes;
  p.M = g.M;
  p.M8 = g.M / kLanes;
  p.TH = ceil_div(g.out[0], 2);
  p.TW = ceil_div(g.out[1], 2);
  p.T = g.N * p.TH * p.TW;
  const int64_t tb_max = std::max<int64_t>(kRows, kChunkFloats / (kPoints * p.Cp) / kRows * kRows);
  p.chunks = ceil_div(p.T, tb_max);
  // Chunks of equal size, rounded up to whole register tiles.
  p.TB = std::min(tb_max, ceil_div(ceil_div(p.T, p.chunks), kRows) * kRows);
  p.chunks = ceil_div(p.T, p.TB);
  p.panels = ceil_div(p.M, kPanel);
  threads = std::max(1, threads);
  // Few chunks (a small image) split their output channels too, so every thread has work; a
  // thread whose consecutive items share a chunk transforms its inputs once.
  p.mgroups = p.chunks >= 3 * threads ? 1 : std::min(p.panels, ceil_div(3 * threads, p.chunks));
  p.items = p.chunks * p.mgroups;
  p.workers = static_cast<int>(std::min<int64_t>(threads, p.items));
  return p;
}

/// V = B^T d B for one tile's 4x4 vectors; point (i, j) goes to v[(4i + j) * point_stride].
inline void transform_input(const __m256 (&d)[4][4], float* v, int64_t point_stride) {
  __m256 t[4][4];
  for (int j = 0; j < 4; ++j) {
    t[0][j] = _mm256_sub_ps(d[0][j], d[2][j]);
    t[1][j] = _mm256_add_ps(d[1][j], d[2][j]);
    t[2][j] = _mm256_sub_ps(d[2][j], d[1][j]);
    t[3][j] = _mm256_sub_ps(d[1][j], d[3][j]);
  }
  for (int i = 0; i < 4; ++i) {
    float* row = v + 4 * i * point_stride;
    _mm256_storeu_ps(row, _mm256_sub_ps(t[i][0], t[i][2]));
    _mm256_storeu_ps(row + point_stride, _mm256_add_ps(t[i][1], t[i][2]));
    _mm256_storeu_ps(row + 2 * point_stride, _mm256_sub_ps(t[i][2], t[i][1]));
    _mm256_storeu_ps(row + 3 * point_stride, _mm256_sub_ps(t[i][1], t[i][3]));
  }
}

/// Transforms the inputs of tiles [t0, t0 + count) into v ([16][TB][Cp]).
void transform_chunk(const Geometry& g, const Plan& p, const float* x, int64_t t0, int64_t count,
                     float* v) {
  const int64_t H = g.in[0], W = g.in[1], pt = g.pad_l[0], pl = g.pad_l[1];
  const int64_t point_stride = p.TB * p.Cp;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t t = t0 + r, tx = t % p.TW, ty = (t / p.TW) % p.TH, n = t / (p.TW * p.TH);
    const int64_t iy0 = 2 * ty - pt, ix0 = 2 * tx - pl;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + 4 <= H && ix0 + 4 <= W;
    for (int64_t cb = 0; cb < p.C8; ++cb) {
      const float* plane = x + (n * p.C8 + cb) * H * W * kLanes;
      __m256 d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const int64_t iy = iy0 + i, ix = ix0 + j;
          d[i][j] = inside || (iy >= 0 && iy < H && ix >= 0 && ix < W)
                        ? _mm256_loadu_ps(plane + (iy * W + ix) * kLanes)
                        : _mm256_setzero_ps();
        }
      transform_input(d, v + r * p.Cp + cb * kLanes, point_stride);
    }
  }
}

/// out[r][0 .. 8 * NV) = sum over c < cp of v[r * cp + c] * u[c * 8 * NV ...], for R rows; out
/// rows kPanel floats apart.
template <int R, int NV>
void gemm_tile(const float* v, int64_t cp, const float* u, float* out) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) acc[r][k] = _mm256_setzero_ps();
  for (int64_t c = 0; c < cp; ++c) {
    __m256 w[NV];
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) w[k] = _mm256_loadu_ps(u + (c * NV + k) * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(v + r * cp + c);
#pragma GCC unroll 2
      for (int k = 0; k < NV; ++k) acc[r][k] = _mm256_fmadd_ps(a, w[k], acc[r][k]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) _mm256_storeu_ps(out + r * kPanel + k * kLanes, acc[r][k]);
}

template <int NV>
void gemm_rows(int64_t rows, const float* v, int64_t cp, const float* u, float* out) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows)
    gemm_tile<kRows, NV>(v + r * cp, cp, u, out + r * kPanel);
  v += r * cp, out += r * kPanel;
  switch (rows - r) {
    case 5: gemm_tile<5, NV>(v, cp, u, out); break;
    case 4: gemm_tile<4, NV>(v, cp, u, out); break;
    case 3: gemm_tile<3, NV>(v, cp, u, out); break;
    case 2: gemm_tile<2, NV>(v, cp, u, out); break;
    case 1: gemm_tile<1, NV>(v, cp, u, out); break;
    default: break;
  }
}

/// dst = act(y + z) for one 8-channel vector (z may be null).
inline void store_output(float* dst, __m256 y, const float* z, const Activation& act) {
  if (z) y = _mm256_add_ps(y, _mm256_loadu_ps(z));
  if (act.kind == Activation::Kind::Relu) y = _mm256_max_ps(y, _mm256_setzero_ps());
  _mm256_storeu_ps(dst, y);
  if (act.kind != Activation::Kind::None && act.kind != Activation::Kind::Relu)
    for (int l = 0; l < kLanes; ++l) dst[l] = act.apply(dst[l]);
}

/// Y = A^T m A (+ bias, Z, activation) for tiles [t0, t0 + count) and the output blocks of
/// panel `panel` (NV vectors), from mo ([16][TB][kPanel]).
void transform_outputs(const Geometry& g, const Plan& p, int64_t t0, int64_t count, int64_t panel,
                       int nv, const float* mo, const float* bias, const float* z, float* y,
                       const Activation& act) {
  const int64_t OH = g.out[0], OW = g.out[1];
  const int64_t point_stride = p.TB * kPanel;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t t = t0 + r, tx = t % p.TW, ty = (t / p.TW) % p.TH, n = t / (p.TW * p.TH);
    for (int k = 0; k < nv; ++k) {
      const int64_t ob = panel * (kPanel / kLanes) + k;
      const float* m = mo + r * kPanel + k * kLanes;
      __m256 s[2][4];
      for (int j = 0; j < 4; ++j) {
        const __m256 m0 = _mm256_loadu_ps(m + j * point_stride),
                     m1 = _mm256_loadu_ps(m + (4 + j) * point_stride),
                     m2 = _mm256_loadu_ps(m + (8 + j) * point_stride),
                     m3 = _mm256_loadu_ps(m + (12 + j) * point_stride);
        s[0][j] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
        s[1][j] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
      }
      const __m256 b = bias ? _mm256_loadu_ps(bias + ob * kLanes) : _mm256_setzero_ps();
      const int64_t base = (n * p.M8 + ob) * OH * OW;
      for (int i = 0; i < 2; ++i) {
        const int64_t oy = 2 * ty + i;
        if (oy >= OH) break;
        const __m256 y0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[i][0], s[i][1]), s[i][2]), b);
        const __m256 y1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[i][1], s[i][2]), s[i][3]), b);
        const int64_t at = (base + oy * OW + 2 * tx) * kLanes;
        store_output(y + at, y0, z ? z + at : nullptr, act);
        if (2 * tx + 1 < OW) store_output(y + at + kLanes, y1, z ? z + at + kLanes : nullptr, act);
      }
    }
  }
}

/// Start of output panel `panel`'s weights within one point's U (panels before it are 16 wide).
int64_t panel_offset(int64_t panel, int64_t cp) { return panel * kPanel * cp; }
int panel_vectors(int64_t panel, int64_t M) {
  return static_cast<int>(std::min<int64_t>(kPanel, M - panel * kPanel) / kLanes);
}

}  // namespace

bool winograd_f2_suits(const Geometry& g) {
  if (g.nsp() != 2 || g.G != 1 || g.M % kLanes != 0 || g.C < 1 || g.N < 1) return false;
  for (size_t d = 0; d < 2; ++d)
    if (g.k[d] != 3 || g.stride[d] != 1 || g.dil[d] != 1 || g.pad_l[d] < 0 || g.pad_r[d] < 0 ||
        g.out[d] < 1)
      return false;
  return true;
}

int64_t winograd_f2_weights_numel(int64_t M, int64_t C) {
  return kPoints * M * ceil_div(C, kLanes) * kLanes;
}

void winograd_f2_pack_weights(const float* w, int64_t M, int64_t C, float* u, int threads) {
  const int64_t cp = ceil_div(C, kLanes) * kLanes, point_floats = M * cp;
  parallel_for(M, threads, 8, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t panel = m / kPanel, width = panel_vectors(panel, M) * kLanes;
      float* out = u + panel_offset(panel, cp) + (m - panel * kPanel);
      for (int64_t c = 0; c < cp; ++c) {
        float uu[4][4] = {};
        if (c < C) {
          const float* g = w + (m * C + c) * 9;
          float gg[4][3];  // G g
          for (int j = 0; j < 3; ++j) {
            gg[0][j] = g[j];
            gg[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
            gg[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
            gg[3][j] = g[6 + j];
          }
          for (int i = 0; i < 4; ++i) {  // (G g) G^T
            uu[i][0] = gg[i][0];
            uu[i][1] = 0.5f * (gg[i][0] + gg[i][1] + gg[i][2]);
            uu[i][2] = 0.5f * (gg[i][0] - gg[i][1] + gg[i][2]);
            uu[i][3] = gg[i][2];
          }
        }
        for (int pt = 0; pt < kPoints; ++pt) out[pt * point_floats + c * width] = uu[pt / 4][pt % 4];
      }
    }
  });
}

int64_t winograd_f2_scratch_numel(const Geometry& g, int threads) {
  const Plan p = make_plan(g, threads);
  return p.workers * p.worker_floats();
}

void winograd_f2_conv(const Geometry& g, const float* x, const float* u, const float* bias,
                      const float* z, float* y, const Activation& act, float* scratch,
                      int threads) {
  const Plan p = make_plan(g, threads);
  const int64_t point_floats = p.M * p.Cp;
  // One item per worker index, so each has its own scratch whether it runs on a thread of its
  // own or inline.
  parallel_for(p.workers, p.workers, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      float* v = scratch + w * p.worker_floats();
      float* mo = v + kPoints * p.TB * p.Cp;
      int64_t have = -1;  // the chunk whose inputs v holds
      for (int64_t item = w * p.items / p.workers; item < (w + 1) * p.items / p.workers; ++item) {
        const int64_t chunk = item / p.mgroups, group = item % p.mgroups;
        const int64_t t0 = chunk * p.TB, count = std::min(p.TB, p.T - t0);
        if (chunk != have) transform_chunk(g, p, x, t0, count, v), have = chunk;
        const int64_t pa = group * p.panels / p.mgroups, pb = (group + 1) * p.panels / p.mgroups;
        for (int64_t panel = pa; panel < pb; ++panel) {
          const int nv = panel_vectors(panel, p.M);
          for (int pt = 0; pt < kPoints; ++pt) {
            const float* vp = v + pt * p.TB * p.Cp;
            const float* up = u + pt * point_floats + panel_offset(panel, p.Cp);
            float* out = mo + pt * p.TB * kPanel;
            if (nv == 2) gemm_rows<2>(count, vp, p.Cp, up, out);
            else gemm_rows<1>(count, vp, p.Cp, up, out);
          }
          transform_outputs(g, p, t0, count, panel, nv, mo, bias, z, y, act);
        }
      }
    }
  });
}

}  // namespace onyx::cpu
