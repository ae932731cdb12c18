#include "kernels/cpu/winograd_conv.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int kLanes = 8;   // channels per block and per AVX2 vector
constexpr int kPanel = 16;  // output channels per register tile (two vectors)
constexpr int kRows = 6;    // tiles per register tile: 6 x 2 accumulators + 2 weights + 1 broadcast
// Transformed inputs of one chunk of tiles (points x tiles x channels) stay within this many
// floats (768 KB). Every chunk reads all of U (16 MB for 512 x 512 channels in F(2x2)), so
// fewer, larger chunks win over ones that fit L2: ResNet-18's 512@7x7 at 1 thread took 3.2 ms
// in two chunks of 384 KB, 2.1-2.5 ms in one; 64@56x56 1.5 ms either way (AVX2 EPYC).
constexpr int64_t kChunkFloats = 192 * 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
/// a * k + b and b - a * k for a constant k.
inline __m256 fma_k(__m256 a, float k, __m256 b) {
  return _mm256_fmadd_ps(a, _mm256_set1_ps(k), b);
}
inline __m256 fnma_k(__m256 a, float k, __m256 b) {
  return _mm256_fnmadd_ps(a, _mm256_set1_ps(k), b);
}

/// The 1-D transforms of F(m x m, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional
/// Neural Networks"): input t = B^T d, output y = A^T p, weights u = G g, over A = m + 2 points.
template <int m>
struct Wino;

template <>
struct Wino<2> {
  static constexpr int A = 4;
  static void input(const __m256 (&d)[A], __m256 (&t)[A]) {
    t[0] = sub(d[0], d[2]);
    t[1] = add(d[1], d[2]);
    t[2] = sub(d[2], d[1]);
    t[3] = sub(d[1], d[3]);
  }
  static void output(const __m256 (&p)[A], __m256 (&y)[2]) {
    y[0] = add(add(p[0], p[1]), p[2]);
    y[1] = sub(sub(p[1], p[2]), p[3]);
  }
  // Over 8 output channels at once (GCC vector arithmetic on __m256, as in Wino<4>).
  static void weights(const __m256 (&g)[3], __m256 (&u)[A]) {
    u[0] = g[0];
    u[1] = 0.5f * (g[0] + g[1] + g[2]);
    u[2] = 0.5f * (g[0] - g[1] + g[2]);
    u[3] = g[2];
  }
};

template <>
struct Wino<4> {
  static constexpr int A = 6;
  // B^T rows: [4 0 -5 0 1 0] [0 -4 -4 1 1 0] [0 4 -4 -1 1 0] [0 -2 -1 2 1 0] [0 2 -1 -2 1 0]
  // [0 4 0 -5 0 1].
  static void input(const __m256 (&d)[A], __m256 (&t)[A]) {
    const __m256 a = fnma_k(d[2], 4.f, d[4]), b = fnma_k(d[1], 4.f, d[3]);
    const __m256 c = sub(d[4], d[2]), e = _mm256_mul_ps(sub(d[3], d[1]), _mm256_set1_ps(2.f));
    t[0] = fma_k(d[0], 4.f, fnma_k(d[2], 5.f, d[4]));
    t[1] = add(a, b);
    t[2] = sub(a, b);
    t[3] = add(c, e);
    t[4] = sub(c, e);
    t[5] = fma_k(d[1], 4.f, fnma_k(d[3], 5.f, d[5]));
  }
  // A^T rows: [1 1 1 1 1 0] [0 1 -1 2 -2 0] [0 1 1 4 4 0] [0 1 -1 8 -8 1].
  static void output(const __m256 (&p)[A], __m256 (&y)[4]) {
    const __m256 a = add(p[1], p[2]), b = sub(p[1], p[2]), c = add(p[3], p[4]),
                 d = sub(p[3], p[4]);
    y[0] = add(add(p[0], a), c);
    y[1] = fma_k(d, 2.f, b);
    y[2] = fma_k(c, 4.f, a);
    y[3] = add(fma_k(d, 8.f, b), p[5]);
  }
  // G rows: [1/4 0 0] [-1/6 -1/6 -1/6] [-1/6 1/6 -1/6] [1/24 1/12 1/6] [1/24 -1/12 1/6] [0 0 1].
  static void weights(const __m256 (&g)[3], __m256 (&u)[A]) {
    u[0] = g[0] / 4.0f;
    u[1] = -(g[0] + g[1] + g[2]) / 6.0f;
    u[2] = -(g[0] - g[1] + g[2]) / 6.0f;
    u[3] = g[0] / 24.0f + g[1] / 12.0f + g[2] / 6.0f;
    u[4] = g[0] / 24.0f - g[1] / 12.0f + g[2] / 6.0f;
    u[5] = g[2];
  }
};

/// How a convolution is cut: tiles into chunks, output channels into panels of 16 and the
/// panels into groups, one (chunk, group) pair per work item.
struct Plan {
  int tile = 2, points = 16;               // output tile m, (m + 2)^2 Winograd points
  int64_t C8 = 0, Cp = 0, M = 0, M8 = 0;  // input blocks, padded input channels, output channels
  int64_t TH = 0, TW = 0, T = 0;          // tiles down, across, in all (over the batch)
  int64_t TB = 0, chunks = 0;             // tiles per chunk (the last may hold fewer)
  int64_t panels = 0, mgroups = 0, items = 0;
  int workers = 1;
  int64_t worker_floats() const { return points * TB * (Cp + kPanel); }
};

Plan make_plan(int tile, const Geometry& g, int threads) {
  Plan p;
  p.tile = tile;
  p.points = (tile + 2) * (tile + 2);
  p.C8 = ceil_div(g.C, kLanes);
  p.Cp = p.C8 * kLanes;
  p.M = g.M;
  p.M8 = g.M / kLanes;
  p.TH = ceil_div(g.out[0], tile);
  p.TW = ceil_div(g.out[1], tile);
  p.T = g.N * p.TH * p.TW;
  const int64_t tb_max =
      std::max<int64_t>(kRows, kChunkFloats / (p.points * p.Cp) / kRows * kRows);
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

/// Transforms the inputs of tiles [t0, t0 + count) into v ([points][TB][Cp]).
template <int m>
void transform_chunk(const Geometry& g, const Plan& p, const float* x, int64_t t0, int64_t count,
                     float* v) {
  constexpr int A = Wino<m>::A;
  const int64_t H = g.in[0], W = g.in[1], pt = g.pad_l[0], pl = g.pad_l[1];
  const int64_t point_stride = p.TB * p.Cp;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t t = t0 + r, tx = t % p.TW, ty = (t / p.TW) % p.TH, n = t / (p.TW * p.TH);
    const int64_t iy0 = m * ty - pt, ix0 = m * tx - pl;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + A <= H && ix0 + A <= W;
    for (int64_t cb = 0; cb < p.C8; ++cb) {
      const float* plane = x + (n * p.C8 + cb) * H * W * kLanes;
      __m256 d[A][A], col[A], tcol[A], t[A][A];
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < A; ++j) {
          const int64_t iy = iy0 + i, ix = ix0 + j;
          d[i][j] = inside || (iy >= 0 && iy < H && ix >= 0 && ix < W)
                        ? _mm256_loadu_ps(plane + (iy * W + ix) * kLanes)
                        : _mm256_setzero_ps();
        }
      for (int j = 0; j < A; ++j) {  // B^T d, column by column
        for (int i = 0; i < A; ++i) col[i] = d[i][j];
        Wino<m>::input(col, tcol);
        for (int i = 0; i < A; ++i) t[i][j] = tcol[i];
      }
      float* out = v + r * p.Cp + cb * kLanes;
      for (int i = 0; i < A; ++i) {  // (B^T d) B, row by row
        Wino<m>::input(t[i], tcol);
        for (int j = 0; j < A; ++j) _mm256_storeu_ps(out + (i * A + j) * point_stride, tcol[j]);
      }
    }
  }
}

/// out[r][0 .. 8 * NV) = sum over c < cp of v[r * cp + c] * u[c * 8 * NV ...], for R rows; out
/// rows kPanel floats apart. With `next`, one cache line of the next point's weights (the same
/// size as u) is prefetched per step of c.
template <int R, int NV>
void gemm_tile(const float* v, int64_t cp, const float* u, float* out, const float* next) {
  __m256 acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) acc[r][k] = _mm256_setzero_ps();
  for (int64_t c = 0; c < cp; ++c) {
    if (next) _mm_prefetch(reinterpret_cast<const char*>(next + c * NV * kLanes), _MM_HINT_T0);
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

/// All `rows` rows by one point's panel u; the first register tile prefetches `next` (the next
/// point's panel: U comes from memory, 16-38 MB for 512 x 512 channels, and each panel is read
/// by the chunk's few row tiles only).
template <int NV>
void gemm_rows(int64_t rows, const float* v, int64_t cp, const float* u, float* out,
               const float* next) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows, next = nullptr)
    gemm_tile<kRows, NV>(v + r * cp, cp, u, out + r * kPanel, next);
  v += r * cp, out += r * kPanel;
  switch (rows - r) {
    case 5: gemm_tile<5, NV>(v, cp, u, out, next); break;
    case 4: gemm_tile<4, NV>(v, cp, u, out, next); break;
    case 3: gemm_tile<3, NV>(v, cp, u, out, next); break;
    case 2: gemm_tile<2, NV>(v, cp, u, out, next); break;
    case 1: gemm_tile<1, NV>(v, cp, u, out, next); break;
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

/// Y = A^T P A (+ bias, Z, activation) for tiles [t0, t0 + count) and the output blocks of
/// panel `panel` (nv vectors), from the products `prod` ([points][TB][kPanel]).
template <int m>
void transform_outputs(const Geometry& g, const Plan& p, int64_t t0, int64_t count, int64_t panel,
                       int nv, const float* prod, const float* bias, const float* z, float* y,
                       const Activation& act) {
  constexpr int A = Wino<m>::A;
  const int64_t OH = g.out[0], OW = g.out[1];
  const int64_t point_stride = p.TB * kPanel;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t t = t0 + r, tx = t % p.TW, ty = (t / p.TW) % p.TH, n = t / (p.TW * p.TH);
    for (int k = 0; k < nv; ++k) {
      const int64_t ob = panel * (kPanel / kLanes) + k;
      const float* pr = prod + r * kPanel + k * kLanes;
      __m256 s[m][A], col[A], ycol[m];
      for (int j = 0; j < A; ++j) {  // A^T P, column by column
        for (int i = 0; i < A; ++i) col[i] = _mm256_loadu_ps(pr + (i * A + j) * point_stride);
        Wino<m>::output(col, ycol);
        for (int i = 0; i < m; ++i) s[i][j] = ycol[i];
      }
      const __m256 b = bias ? _mm256_loadu_ps(bias + ob * kLanes) : _mm256_setzero_ps();
      const int64_t base = (n * p.M8 + ob) * OH * OW;
      const int64_t ox0 = m * tx, width = std::min<int64_t>(m, OW - ox0);
      for (int i = 0; i < m; ++i) {  // (A^T P) A, row by row
        const int64_t oy = m * ty + i;
        if (oy >= OH) break;
        Wino<m>::output(s[i], ycol);
        const int64_t at = (base + oy * OW + ox0) * kLanes;
        for (int j = 0; j < width; ++j)
          store_output(y + at + j * kLanes, add(ycol[j], b), z ? z + at + j * kLanes : nullptr,
                       act);
      }
    }
  }
}

/// Start of output panel `panel`'s weights within one point's U (panels before it are 16 wide).
int64_t panel_offset(int64_t panel, int64_t cp) { return panel * kPanel * cp; }
int panel_vectors(int64_t panel, int64_t M) {
  return static_cast<int>(std::min<int64_t>(kPanel, M - panel * kPanel) / kLanes);
}

/// U for 8 output channels at a time, vectorised over them: each (block, input channel) is one
/// G g G^T of vectors and A^2 contiguous 8-float stores. (One channel at a time, with a 4-byte
/// store per point, it took ~60 ms of ResNet-18's session creation.)
template <int m>
void pack_weights(const float* w, int64_t M, int64_t C, float* u, int threads) {
  constexpr int A = Wino<m>::A;
  const int64_t cp = ceil_div(C, kLanes) * kLanes, point_floats = M * cp;
  parallel_for(M / kLanes, threads, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t o0 = blk * kLanes, panel = o0 / kPanel;
      const int64_t width = panel_vectors(panel, M) * kLanes;
      float* out = u + panel_offset(panel, cp) + (o0 - panel * kPanel);
      for (int64_t c = 0; c < cp; ++c) {
        __m256 uu[A][A];
        if (c < C) {
          alignas(32) float k[9][kLanes];
          for (int l = 0; l < kLanes; ++l)
            for (int t = 0; t < 9; ++t) k[t][l] = w[((o0 + l) * C + c) * 9 + t];
          __m256 gg[A][3], col[3], ucol[A];
          for (int j = 0; j < 3; ++j) {  // G g, column by column
            for (int i = 0; i < 3; ++i) col[i] = _mm256_load_ps(k[3 * i + j]);
            Wino<m>::weights(col, ucol);
            for (int i = 0; i < A; ++i) gg[i][j] = ucol[i];
          }
          for (int i = 0; i < A; ++i) Wino<m>::weights(gg[i], uu[i]);  // (G g) G^T
        } else {
          for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j) uu[i][j] = _mm256_setzero_ps();
        }
        for (int pt = 0; pt < A * A; ++pt)
          _mm256_storeu_ps(out + pt * point_floats + c * width, uu[pt / A][pt % A]);
      }
    }
  });
}

template <int m>
void run(const Plan& p, const Geometry& g, const float* x, const float* u, const float* bias,
         const float* z, float* y, const Activation& act, float* scratch) {
  const int64_t point_floats = p.M * p.Cp;
  // One item per worker index, so each has its own scratch whether it runs on a thread of its
  // own or inline.
  parallel_for(p.workers, p.workers, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      float* v = scratch + w * p.worker_floats();
      float* prod = v + p.points * p.TB * p.Cp;
      int64_t have = -1;  // the chunk whose inputs v holds
      for (int64_t item = w * p.items / p.workers; item < (w + 1) * p.items / p.workers; ++item) {
        const int64_t chunk = item / p.mgroups, group = item % p.mgroups;
        const int64_t t0 = chunk * p.TB, count = std::min(p.TB, p.T - t0);
        if (chunk != have) transform_chunk<m>(g, p, x, t0, count, v), have = chunk;
        const int64_t pa = group * p.panels / p.mgroups, pb = (group + 1) * p.panels / p.mgroups;
        for (int64_t panel = pa; panel < pb; ++panel) {
          const int nv = panel_vectors(panel, p.M);
          for (int pt = 0; pt < p.points; ++pt) {
            const float* vp = v + pt * p.TB * p.Cp;
            const float* up = u + pt * point_floats + panel_offset(panel, p.Cp);
            float* out = prod + pt * p.TB * kPanel;
            const float* next = pt + 1 < p.points ? up + point_floats : nullptr;
            if (nv == 2) gemm_rows<2>(count, vp, p.Cp, up, out, next);
            else gemm_rows<1>(count, vp, p.Cp, up, out, next);
          }
          transform_outputs<m>(g, p, t0, count, panel, nv, prod, bias, z, y, act);
        }
      }
    }
  });
}

void check_tile(int tile) {
  ONYX_CHECK(tile == 2 || tile == 4, "Winograd output tile must be 2 or 4, got {}", tile);
}

}  // namespace

bool winograd_suits(const Geometry& g) {
  if (g.nsp() != 2 || g.G != 1 || g.M % kLanes != 0 || g.C < 1 || g.N < 1) return false;
  for (size_t d = 0; d < 2; ++d)
    if (g.k[d] != 3 || g.stride[d] != 1 || g.dil[d] != 1 || g.pad_l[d] < 0 || g.pad_r[d] < 0 ||
        g.out[d] < 1)
      return false;
  return true;
}

int winograd_tile(const Geometry& g) {
  // ResNet-18's layers, F(4x4) / F(2x2) ms at 1 and 2 threads (AVX2 EPYC): 64@56x56 1.01/1.42,
  // 0.55/0.95; 128@28 0.98/1.34, 0.53/0.88; 256@14 (16 tiles of 4x4) 1.34/1.50, 0.80/1.07;
  // 512@7 (4 tiles) 2.98/2.28, 1.66/1.33: there each tile's share of U's 38 MB is too large.
  return g.N * ceil_div(g.out[0], 4) * ceil_div(g.out[1], 4) >= 16 ? 4 : 2;
}

int64_t winograd_weights_numel(int tile, int64_t M, int64_t C) {
  check_tile(tile);
  return int64_t{tile + 2} * (tile + 2) * M * ceil_div(C, kLanes) * kLanes;
}

void winograd_pack_weights(int tile, const float* w, int64_t M, int64_t C, float* u,
                           int threads) {
  check_tile(tile);
  if (tile == 2) pack_weights<2>(w, M, C, u, threads);
  else pack_weights<4>(w, M, C, u, threads);
}

int64_t winograd_scratch_numel(int tile, const Geometry& g, int threads) {
  check_tile(tile);
  const Plan p = make_plan(tile, g, threads);
  return p.workers * p.worker_floats();
}

void winograd_conv(int tile, const Geometry& g, const float* x, const float* u,
                   const float* bias, const float* z, float* y, const Activation& act,
                   float* scratch, int threads) {
  check_tile(tile);
  const Plan p = make_plan(tile, g, threads);
  if (tile == 2) run<2>(p, g, x, u, bias, z, y, act, scratch);
  else run<4>(p, g, x, u, bias, z, y, act, scratch);
}

}  // namespace onyx::cpu
