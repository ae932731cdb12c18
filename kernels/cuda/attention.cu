// Attention device code. Scores follow kernels/cpu/attention.cpp step by step, including
// where it rounds to the input dtype T (Q and K each scaled by sqrt(scale) and rounded, the
// score rounded, softcap's three roundings, score + bias rounded), so float16 scores match
// the CPU's; the fused kernel differs only in not rounding the probabilities to T before
// multiplying by V (it never materialises them).
//
// flash_fwd: a block handles BQ query rows of one (batch, kv head): with grouped-query
// attention the rows of every q head sharing that kv head, so K and V are read once for all
// of them. Per key tile of 32 (K and V staged in shared memory as float): each lane scores
// one key against the warp's RW rows, the warp keeps a running max / sum per row (online
// softmax), and the probabilities times V accumulate in registers (lane owns channels
// lane, lane + 32, ...). Key tiles that every row of the block masks (past the mask's last
// axis, past nonpad_kv_seqlen, beyond the causal diagonal or the window) are skipped. With
// too few blocks for the device, blockIdx.z also splits the key range; flash_combine merges.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "kernels/cuda/attention_launch.h"
#include "kernels/cuda/device_util.cuh"

namespace onyx::cuda::attn {
namespace {

// T is float, __half or __nv_bfloat16 (dispatch below): widen gives float, and every narrow<T>
// here is handed a float.
using dev::ceil_div, dev::narrow, dev::same, dev::warp_sum, dev::widen;

/// x rounded to T's precision, as the CPU does where it stores a T value.
template <class T> __device__ __forceinline__ float rnd(float x) {
  if constexpr (same<T, float>) return x;
  else return widen(narrow<T>(x));
}
__device__ __forceinline__ float round_to(Round r, float x) {
  return r == Round::F16 ? rnd<__half>(x) : r == Round::BF16 ? rnd<__nv_bfloat16>(x) : x;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float ninf() { return -CUDART_INF_F; }

__device__ __forceinline__ float mask_value(const Params& p, int64_t off) {
  switch (p.mask_t) {
    case MaskType::Bool: return static_cast<const uint8_t*>(p.mask)[off] ? 0.f : ninf();
    case MaskType::F32: return static_cast<const float*>(p.mask)[off];
    case MaskType::F64: return static_cast<float>(static_cast<const double*>(p.mask)[off]);
    case MaskType::F16: return __half2float(static_cast<const __half*>(p.mask)[off]);
    case MaskType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p.mask)[off]);
    default: return 0.f;
  }
}

/// Offset of query position 0 relative to key position 0 for the causal and window masks.
__device__ __forceinline__ int64_t query_offset(const Params& p, int64_t np) { return p.nonpad ? np - p.Sq : p.P; }

/// Additive bias of (batch b, q head hq, query i, key j): the mask (keys past its last axis
/// masked), then -inf where causal, window or padding masks the key (CPU's fill_bias).
__device__ __forceinline__ float bias_of(const Params& p, int64_t b, int64_t hq, int64_t i, int64_t j, int64_t offset,
                                         int64_t np) {
  float bias = 0.f;
  if (p.mask_t != MaskType::None)
    bias = j < p.mask_len ? mask_value(p, b * p.mask_st[0] + hq * p.mask_st[1] + i * p.mask_st[2] + j * p.mask_st[3])
                          : ninf();
  if (p.causal || p.left >= 0 || p.right >= 0 || p.nonpad) {
    const int64_t diff = i + offset - j;
    bool allowed = !p.causal || diff >= 0;
    if (p.left >= 0) allowed = allowed && diff <= p.left;
    if (p.right >= 0) allowed = allowed && -diff <= p.right;
    if (p.nonpad) allowed = allowed && j < np;
    if (!allowed) bias += ninf();
  }
  return bias;
}

/// The score from Q.K (both pre-scaled) through the CPU's roundings and softcap.
template <class T>
__device__ __forceinline__ float capped(const Params& p, float dot) {
  float s = rnd<T>(dot);
  if (p.softcap > 0.f) s = rnd<T>(rnd<T>(tanhf(rnd<T>(s / p.softcap))) * p.softcap);
  return s;
}

// ---- fused kernel ----

template <int DM>
struct Tile {
  static constexpr int RW = DM > 128 ? 4 : 8;  // query rows per warp (fewer at 256: registers, smem)
  static constexpr int BQ = 4 * RW;            // query rows per block of 4 warps
  static constexpr int BK = 32;                // keys per tile: one per lane when scoring
  static constexpr int NC = DM / 32;           // V channels per lane
};

/// Shared memory of flash_fwd<.., DM>: Q [BQ][Dpad], K [BK][Dpad + 4], V [BK][DvP], P [BQ][BK].
template <int DM>
size_t flash_smem(int64_t Dq, int64_t Dv) {
  const int64_t Dpad = (Dq + 3) / 4 * 4, DvP = (Dv + 31) / 32 * 32;
  using Tl = Tile<DM>;
  return static_cast<size_t>(Tl::BQ * Dpad + Tl::BK * (Dpad + 4) + Tl::BK * DvP + Tl::BQ * Tl::BK) * sizeof(float);
}

template <class T, int DM>
__global__ void __launch_bounds__(128, 3) flash_fwd(Params p, int splits, float* __restrict__ part) {
  using Tl = Tile<DM>;
  constexpr int RW = Tl::RW, BQ = Tl::BQ, BK = Tl::BK, NC = Tl::NC;
  extern __shared__ __align__(16) float smem[];
  const int Dq = static_cast<int>(p.Dq), Dv = static_cast<int>(p.Dv);
  const int Dpad = (Dq + 3) & ~3, kst = Dpad + 4, DvP = (Dv + 31) & ~31;
  float* Qs = smem;  // offsets stay multiples of 4 floats: float4 loads are aligned
  float* Ks = Qs + BQ * Dpad;
  float* Vs = Ks + BK * kst;
  float* Ps = Vs + BK * DvP;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t hk = blockIdx.y, b = blockIdx.z / splits;
  const int split = static_cast<int>(blockIdx.z % splits);
  const int64_t rep = p.Hq / p.Hk, rows = rep * p.Sq, r0 = static_cast<int64_t>(blockIdx.x) * BQ;
  const T* qp = static_cast<const T*>(p.q.p);
  const T* kbase = static_cast<const T*>(p.k.p) + b * p.k.batch + hk * p.k.head;
  const T* vbase = static_cast<const T*>(p.v.p) + b * p.v.batch + hk * p.v.head;

  // Q rows of the block, scaled and rounded; rows past the end are zeros.
  for (int rr = warp; rr < BQ; rr += 4) {
    const int64_t r = r0 + rr;
    const T* qrow = r < rows ? qp + b * p.q.batch + (hk * rep + r / p.Sq) * p.q.head + (r % p.Sq) * p.q.row : nullptr;
    for (int d = lane; d < Dpad; d += 32) Qs[rr * Dpad + d] = qrow && d < Dq ? rnd<T>(widen(qrow[d]) * p.q_scale) : 0.f;
  }
  const int64_t wr0 = r0 + warp * RW;  // this warp's first row
  const bool any_bias = p.mask_t != MaskType::None || p.causal || p.left >= 0 || p.right >= 0 || p.nonpad;
  // Keys that some row of the block may attend: [kv_begin, kv_end).
  const int64_t np = p.nonpad ? p.nonpad[b] : 0, offset = query_offset(p, np);
  int64_t kv_begin = 0, kv_end = p.Skv;
  if (p.mask_t != MaskType::None && p.mask_len < kv_end) kv_end = p.mask_len;
  if (p.nonpad) kv_end = min(kv_end, max(np, int64_t(0)));
  const int64_t r_last = min(r0 + BQ, rows) - 1;
  const bool one_head = r0 / p.Sq == r_last / p.Sq;
  const int64_t i_min = one_head ? r0 % p.Sq : 0, i_max = one_head ? r_last % p.Sq : p.Sq - 1;
  if (p.causal) kv_end = min(kv_end, i_max + offset + 1);
  if (p.right >= 0) kv_end = min(kv_end, i_max + offset + p.right + 1);
  if (p.left >= 0) kv_begin = max(kv_begin, i_min + offset - p.left);
  const int64_t tiles = kv_end > kv_begin ? ceil_div(kv_end - kv_begin, BK) : 0;
  const int64_t per_split = ceil_div(tiles, splits), t0 = split * per_split, t1 = min(tiles, t0 + per_split);

  float m[RW], l[RW], o[RW][NC];
#pragma unroll
  for (int rr = 0; rr < RW; ++rr) {
    m[rr] = ninf(), l[rr] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[rr][c] = 0.f;
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t j0 = kv_begin + t * BK;
    __syncthreads();  // the previous tile is consumed (first time: nothing to wait for)
    for (int jj = warp; jj < BK; jj += 4) {
      const int64_t j = j0 + jj;
      const bool in = j < kv_end;
      const T* kr = kbase + j * p.k.row;
      const T* vr = vbase + j * p.v.row;
      for (int d = lane; d < Dpad; d += 32) Ks[jj * kst + d] = in && d < Dq ? rnd<T>(widen(kr[d]) * p.q_scale) : 0.f;
      for (int d = lane; d < DvP; d += 32) Vs[jj * DvP + d] = in && d < Dv ? widen(vr[d]) : 0.f;
    }
    __syncthreads();
    // The bias of the warp's rows against key j0 + lane goes to its slot of Ps, which the
    // same lane later overwrites with the probability (a rolled loop: the int64 index math
    // would otherwise be unrolled RW times and cost registers).
    const int64_t j = j0 + lane;
#pragma unroll 1
    for (int rr = 0; rr < RW; ++rr) {
      const int64_t r = wr0 + rr;
      Ps[(warp * RW + rr) * BK + lane] =
          any_bias && r < rows && j < kv_end ? bias_of(p, b, hk * rep + r / p.Sq, r % p.Sq, j, offset, np) : 0.f;
    }

    // Scores: lane scores key j0 + lane against the warp's rows.
    float s[RW];
#pragma unroll
    for (int rr = 0; rr < RW; ++rr) s[rr] = 0.f;
    const float* krow = Ks + lane * kst;
#pragma unroll 2
    for (int d = 0; d < Dpad; d += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(krow + d);
#pragma unroll
      for (int rr = 0; rr < RW; ++rr) {
        const float4 qv = *reinterpret_cast<const float4*>(Qs + (warp * RW + rr) * Dpad + d);
        s[rr] = fmaf(qv.x, kv.x, s[rr]);
        s[rr] = fmaf(qv.y, kv.y, s[rr]);
        s[rr] = fmaf(qv.z, kv.z, s[rr]);
        s[rr] = fmaf(qv.w, kv.w, s[rr]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < RW; ++rr) {
      float x = ninf();
      if (wr0 + rr < rows && j < kv_end)
        x = round_to(p.sm_round, rnd<T>(capped<T>(p, s[rr]) + Ps[(warp * RW + rr) * BK + lane]));
      // Online softmax; a row with no unmasked key so far keeps m = -inf (shifted by 0).
      const float mn = fmaxf(m[rr], warp_max(x));
      const float mu = mn == ninf() ? 0.f : mn;
      const float alpha = expf(m[rr] - mu), pj = expf(x - mu);  // NaN scores make the row NaN
      l[rr] = l[rr] * alpha + warp_sum(pj);
      m[rr] = mn;
      Ps[(warp * RW + rr) * BK + lane] = pj;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[rr][c] *= alpha;
    }
    __syncwarp();
#pragma unroll 4
    for (int jj = 0; jj < BK; ++jj) {
      float vv[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) vv[c] = 32 * c + lane < DvP ? Vs[jj * DvP + 32 * c + lane] : 0.f;
#pragma unroll
      for (int rr = 0; rr < RW; ++rr) {
        const float pr = Ps[(warp * RW + rr) * BK + jj];
#pragma unroll
        for (int c = 0; c < NC; ++c) o[rr][c] = fmaf(pr, vv[c], o[rr][c]);
      }
    }
  }

#pragma unroll
  for (int rr = 0; rr < RW; ++rr) {
    const int64_t r = wr0 + rr;
    if (r >= rows) continue;
    const int64_t hq = hk * rep + r / p.Sq, qi = r % p.Sq;
    if (splits == 1) {
      // l == 0: every key masked: zeros (0 * V, as the CPU's zeroed probabilities give).
      const float inv = l[rr] == 0.f ? 0.f : 1.f / l[rr];
      T* yr = static_cast<T*>(p.y) + b * p.y_batch + hq * p.y_head + qi * p.y_row;
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (32 * c + lane < Dv) yr[32 * c + lane] = narrow<T>(o[rr][c] * inv);
    } else {
      float* po = part + (((split * p.B + b) * p.Hq + hq) * p.Sq + qi) * (p.Dv + 2);
      if (lane == 0) po[0] = m[rr], po[1] = l[rr];
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (32 * c + lane < Dv) po[2 + 32 * c + lane] = o[rr][c];
    }
  }
}

/// Merges the split key ranges of every query row: a warp per row.
template <class T>
__global__ void __launch_bounds__(256) flash_combine(Params p, int splits, const float* __restrict__ part) {
  const int lane = threadIdx.x & 31;
  const int64_t rows = p.B * p.Hq * p.Sq, width = p.Dv + 2;
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5)) {
    float mx = ninf();
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part[(s * rows + row) * width]);
    const float mu = mx == ninf() ? 0.f : mx;
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float* q = part + (s * rows + row) * width;
      sum += q[1] * expf(q[0] - mu);
    }
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    const int64_t i = row % p.Sq, hq = (row / p.Sq) % p.Hq, b = row / (p.Sq * p.Hq);
    T* yr = static_cast<T*>(p.y) + b * p.y_batch + hq * p.y_head + i * p.y_row;
    for (int64_t d = lane; d < p.Dv; d += 32) {
      float acc = 0.f;
      for (int s = 0; s < splits; ++s) {
        const float* q = part + (s * rows + row) * width;
        acc += q[2 + d] * expf(q[0] - mu);
      }
      yr[d] = narrow<T>(acc * inv);
    }
  }
}

// ---- unfused path: scores (qk_matmul_output / probabilities) and probs @ V ----

/// A block per (query i, q head, batch) row: blockIdx (i, hq, b). Each warp scores keys
/// j = warp, warp + 8, ... (lanes split the channels); mode 3 then normalises the row in place.
template <class T>
__global__ void __launch_bounds__(256) scores_kernel(Params p, int mode, T* __restrict__ out) {
  extern __shared__ __align__(16) float qs[];
  __shared__ float sh_f[32];
  __shared__ int sh_i[32];
  const int64_t i = blockIdx.x, hq = blockIdx.y, b = blockIdx.z, hk = hq / (p.Hq / p.Hk);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const T* qrow = static_cast<const T*>(p.q.p) + b * p.q.batch + hq * p.q.head + i * p.q.row;
  for (int64_t d = threadIdx.x; d < p.Dq; d += blockDim.x) qs[d] = rnd<T>(widen(qrow[d]) * p.q_scale);
  __syncthreads();
  const int64_t np = p.nonpad ? p.nonpad[b] : 0, offset = query_offset(p, np);
  const T* kbase = static_cast<const T*>(p.k.p) + b * p.k.batch + hk * p.k.head;
  T* orow = out + ((b * p.Hq + hq) * p.Sq + i) * p.Skv;
  float bmax = ninf();  // lane 0 of each warp: the largest bias and whether one was NaN
  int bnan = 0;
  for (int64_t j = warp; j < p.Skv; j += nw) {
    const T* kr = kbase + j * p.k.row;
    float dot = 0.f;
    for (int64_t d = lane; d < p.Dq; d += 32) dot = fmaf(qs[d], rnd<T>(widen(kr[d]) * p.q_scale), dot);
    dot = warp_sum(dot);
    if (lane == 0) {
      const float s0 = capped<T>(p, dot), bias = bias_of(p, b, hq, i, j, offset, np);
      bnan |= bias != bias;
      bmax = fmaxf(bmax, bias);
      orow[j] = narrow<T>(mode <= 1 ? s0 : rnd<T>(s0 + bias));
    }
  }
  if (mode != 3) return;

  // Softmax of the row in the softmax precision (kernels/cpu/attention.cpp softmax_row): a
  // NaN anywhere gives NaNs; a row whose bias masks every key gives zeros.
  if (lane == 0) sh_f[warp] = bmax, sh_i[warp] = bnan;
  __syncthreads();  // also makes the row's scores visible to the whole block
  bool all_masked = true;
  for (int w = 0; w < nw; ++w) all_masked = all_masked && !sh_i[w] && sh_f[w] == ninf();
  __syncthreads();
  float mx = ninf();
  int any_nan = 0;
  for (int64_t j = threadIdx.x; j < p.Skv; j += blockDim.x) {
    const float v = round_to(p.sm_round, widen(orow[j]));
    any_nan |= v != v;
    mx = fmaxf(mx, v);
  }
  mx = warp_max(mx);
  any_nan = __any_sync(0xffffffffu, any_nan);
  if (lane == 0) sh_f[warp] = mx, sh_i[warp] = any_nan;
  __syncthreads();
  mx = ninf();
  any_nan = 0;
  for (int w = 0; w < nw; ++w) mx = fmaxf(mx, sh_f[w]), any_nan |= sh_i[w];
  if (any_nan) mx = CUDART_NAN_F;
  else if (mx == ninf()) mx = 0.f;
  __syncthreads();
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < p.Skv; j += blockDim.x) sum += expf(round_to(p.sm_round, widen(orow[j])) - mx);
  sum = warp_sum(sum);
  if (lane == 0) sh_f[warp] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < nw; ++w) sum += sh_f[w];
  if (sum == 0.f) sum = 1.f;
  for (int64_t j = threadIdx.x; j < p.Skv; j += blockDim.x) {
    const float x = round_to(p.sm_round, expf(round_to(p.sm_round, widen(orow[j])) - mx) / sum);
    orow[j] = narrow<T>(all_masked ? 0.f : x);
  }
}

/// y row (i, hq, b) = probs row @ V: threads over channels.
template <class T>
__global__ void __launch_bounds__(256) pv_kernel(Params p, const T* __restrict__ probs) {
  const int64_t i = blockIdx.x, hq = blockIdx.y, b = blockIdx.z, hk = hq / (p.Hq / p.Hk);
  const T* pr = probs + ((b * p.Hq + hq) * p.Sq + i) * p.Skv;
  const T* vbase = static_cast<const T*>(p.v.p) + b * p.v.batch + hk * p.v.head;
  T* yr = static_cast<T*>(p.y) + b * p.y_batch + hq * p.y_head + i * p.y_row;
  for (int64_t d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = 0; j < p.Skv; ++j) acc = fmaf(widen(pr[j]), widen(vbase[j * p.v.row + d]), acc);
    yr[d] = narrow<T>(acc);
  }
}

template <class E>
__global__ void __launch_bounds__(256) concat_kernel(const E* __restrict__ past, const E* __restrict__ cur, View cv,
                                                     E* __restrict__ present, int64_t H, int64_t P, int64_t S,
                                                     int64_t D, int64_t total) {
  const int64_t L = P + S;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = idx % D, s = (idx / D) % L, bh = idx / (D * L), b = bh / H, h = bh % H;
    present[idx] = s < P ? past[(bh * P + s) * D + d] : cur[b * cv.batch + h * cv.head + (s - P) * cv.row + d];
  }
}

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(__half{}); break;
    case DType::BF16: f(__nv_bfloat16{}); break;
  }
}

int head_dim_class(int64_t Dq, int64_t Dv) {
  const int64_t d = Dq > Dv ? Dq : Dv;
  return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

size_t smem_for(int dm, int64_t Dq, int64_t Dv) {
  return dm == 64 ? flash_smem<64>(Dq, Dv) : dm == 128 ? flash_smem<128>(Dq, Dv) : flash_smem<256>(Dq, Dv);
}

/// Key-range splits: enough blocks for about two per SM, each split at least 4 tiles.
int flash_splits(const Params& p) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 0;
  const int dm = head_dim_class(p.Dq, p.Dv);
  const int64_t bq = dm == 256 ? Tile<256>::BQ : Tile<64>::BQ;
  const int64_t blocks = ceil_div((p.Hq / p.Hk) * p.Sq, bq) * p.Hk * p.B;
  const int64_t tiles = ceil_div(p.Skv, 32);
  if (sms <= 0 || blocks >= sms || tiles < 8) return 1;
  int64_t s = ceil_div(2 * sms, blocks);
  if (s > tiles / 4) s = tiles / 4;
  if (s > 64) s = 64;
  if (s * p.B > 65535) s = 65535 / p.B;
  return s < 1 ? 1 : static_cast<int>(s);
}

template <class T, int DM>
void run_flash(const Params& p, int splits, float* part, cudaStream_t s) {
  const size_t bytes = flash_smem<DM>(p.Dq, p.Dv);
  if (bytes > 48 * 1024) cudaFuncSetAttribute(flash_fwd<T, DM>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  const dim3 grid(static_cast<unsigned>(ceil_div((p.Hq / p.Hk) * p.Sq, Tile<DM>::BQ)), static_cast<unsigned>(p.Hk),
                  static_cast<unsigned>(p.B * splits));
  flash_fwd<T, DM><<<grid, 128, bytes, s>>>(p, splits, part);
  if (splits > 1) {
    const int64_t rows = p.B * p.Hq * p.Sq, blocks = ceil_div(rows, 8);
    flash_combine<T><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(p, splits, part);
  }
}

}  // namespace

bool flash_supported(DType, int64_t Dq, int64_t Dv) {
  const int dm = head_dim_class(Dq, Dv);
  if (dm == 0) return false;
  int dev = 0, most = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return false;
  return smem_for(dm, Dq, Dv) <= static_cast<size_t>(most);
}

size_t flash_scratch_bytes(DType, const Params& p) {
  const int splits = flash_splits(p);
  return splits > 1 ? static_cast<size_t>(splits) * p.B * p.Hq * p.Sq * (p.Dv + 2) * sizeof(float) : 0;
}

void launch_flash(DType t, const Params& p, void* scratch, cudaStream_t s) {
  if (p.B * p.Hq * p.Sq <= 0) return;
  const int splits = scratch ? flash_splits(p) : 1;
  float* part = static_cast<float*>(scratch);
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    switch (head_dim_class(p.Dq, p.Dv)) {
      case 64: run_flash<T, 64>(p, splits, part, s); break;
      case 128: run_flash<T, 128>(p, splits, part, s); break;
      case 256: run_flash<T, 256>(p, splits, part, s); break;
      default: break;
    }
  });
}

void launch_scores(DType t, const Params& p, int mode, void* out, cudaStream_t s) {
  if (p.B * p.Hq * p.Sq <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.Sq), static_cast<unsigned>(p.Hq), static_cast<unsigned>(p.B));
  const size_t bytes = static_cast<size_t>(p.Dq) * sizeof(float);
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    scores_kernel<T><<<grid, 256, bytes, s>>>(p, mode, static_cast<T*>(out));
  });
}

void launch_pv(DType t, const Params& p, const void* probs, cudaStream_t s) {
  if (p.B * p.Hq * p.Sq * p.Dv <= 0) return;
  const dim3 grid(static_cast<unsigned>(p.Sq), static_cast<unsigned>(p.Hq), static_cast<unsigned>(p.B));
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    pv_kernel<T><<<grid, 256, 0, s>>>(p, static_cast<const T*>(probs));
  });
}

void launch_concat(const void* past, const View& cur, void* present, int elem_bytes, int64_t B, int64_t H, int64_t P,
                   int64_t S, int64_t D, cudaStream_t s) {
  const int64_t total = B * H * (P + S) * D;
  if (total <= 0) return;
  const int64_t blocks = ceil_div(total, 256);
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  if (elem_bytes == 2)
    concat_kernel<uint16_t><<<grid, 256, 0, s>>>(static_cast<const uint16_t*>(past), static_cast<const uint16_t*>(cur.p),
                                                 cur, static_cast<uint16_t*>(present), H, P, S, D, total);
  else
    concat_kernel<uint32_t><<<grid, 256, 0, s>>>(static_cast<const uint32_t*>(past), static_cast<const uint32_t*>(cur.p),
                                                 cur, static_cast<uint32_t*>(present), H, P, S, D, total);
}

}  // namespace onyx::cuda::attn
