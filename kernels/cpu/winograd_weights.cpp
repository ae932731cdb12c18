#include "kernels/cpu/winograd_weights.h"

#include <cstring>

#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int kR = 3;

// oneDNN's G matrices (cpu/x64/wino_reorder.hpp), the same constants, so the transformed
// weights are what its kernels expect: F(2x2, 3x3) (alpha 4, jit_fp32_wino_2x3, layouts aaOio
// and aaOBiOo) and F(4x4, 3x3) with its interpolation points (alpha 6, wino_4x3, OBaaIBOIio).
constexpr float kG2[4][kR] = {{1.f, 0.f, 0.f}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0.f, 0.f, 1.f}};
constexpr float kG4[6][kR] = {{1.13777777777778f, 0.f, 0.f},
                              {-0.688403361344538f, -0.430252100840336f, -0.26890756302521f},
                              {-0.688403361344538f, 0.430252100840336f, -0.26890756302521f},
                              {0.119514472455649f, 0.179271708683473f, 0.26890756302521f},
                              {0.119514472455649f, -0.179271708683473f, 0.26890756302521f},
                              {0.f, 0.f, 1.f}};
constexpr int kMaxAlpha = 6, kMaxBlock = 64;

const dnnl_wino_desc_t* wino_of(const dnnl::memory::desc& d) {
  return d.data.format_kind == dnnl_format_kind_wino ? &d.data.format_desc.wino_desc : nullptr;
}

/// Where the oc_block floats of (u_h, u_w, input channel ic, output block obk) start.
struct WinoOffsets {
  const dnnl_wino_desc_t& d;
  int64_t alpha, nb_oc, nb_ic, oc_chunks, ic_chunks;
  int64_t operator()(int64_t uh, int64_t uw, int64_t ic, int64_t obk) const {
    const int64_t ocb = d.oc_block, icb = d.ic_block, oc2 = d.oc2_block;
    const int64_t occ = obk / oc2, ob = obk % oc2, ib = ic / icb, i = ic % icb;
    if (d.wino_format == dnnl_wino_wei_aaOio)  // reorder_to_aaOio
      return ((((uh * alpha + uw) * nb_oc + obk) * nb_ic + ib) * icb + i) * ocb;
    if (d.wino_format == dnnl_wino_wei_aaOBiOo)  // reorder_to_aaOBiOo
      return ((((uh * alpha + uw) * oc_chunks + occ) * nb_ic + ib) * icb + i) * oc2 * ocb +
             ob * ocb;
    // reorder_to_OBaaIBOIio
    const int64_t ic2 = d.ic2_block, icc = ib / ic2, ib2 = ib % ic2;
    return ((((((occ * alpha + uh) * alpha + uw) * ic_chunks + icc) * oc2 + ob) * ic2 + ib2) *
                icb + i) * ocb;
  }
};

}  // namespace

bool can_transform_winograd_weights(const dnnl::memory::desc& from,
                                    const dnnl::memory::desc& to) {
  const dnnl_wino_desc_t* w = wino_of(to);
  if (!w || w->r != kR || to.data_type() != dnnl::memory::data_type::f32) return false;
  const bool f4 = w->wino_format == dnnl_wino_wei_OBaaIBOIio && w->alpha == 6;
  const bool f2 =
      (w->wino_format == dnnl_wino_wei_aaOBiOo || w->wino_format == dnnl_wino_wei_aaOio) &&
      w->alpha == 4;
  const int64_t ic2 = f4 ? w->ic2_block : 1;
  if ((!f4 && !f2) || w->oc_block <= 0 || w->oc_block > kMaxBlock || w->ic_block <= 0 ||
      w->oc2_block <= 0 || ic2 <= 0 || w->oc % (w->oc_block * w->oc2_block) != 0 ||
      w->ic % (w->ic_block * ic2) != 0)
    return false;
  const auto dims = from.dims();
  if (dims.size() != 4 || dims[2] != kR || dims[3] != kR || dims[0] > w->oc || dims[1] > w->ic ||
      from.data_type() != dnnl::memory::data_type::f32)
    return false;
  // Plain OIHW: the only source layout transform_winograd_weights reads.
  return from == dnnl::memory::desc(dims, dnnl::memory::data_type::f32,
                                    dnnl::memory::format_tag::oihw);
}

namespace {

/// One task: the transformed weights of output block `obk` for input channels [ic0, ic1).
/// `kOcb` > 0 fixes the block's width at compile time, so the lane loops vectorise; 0 reads
/// it from `ocb` (any other width oneDNN may choose).
template <int kOcb>
void transform_block(const float* w, int64_t M, int64_t C, const WinoOffsets& offset,
                     const float (*G)[kR], int alpha, int64_t ocb_rt, int64_t obk, int64_t ic0,
                     int64_t ic1, float* out) {
  const int64_t ocb = kOcb > 0 ? kOcb : ocb_rt;
  float g[kR * kR][kMaxBlock], tmp[kR][kMaxAlpha][kMaxBlock];
  for (int64_t ic = ic0; ic < ic1; ++ic) {
    // The 3x3 kernels of this input channel for the block's output channels, lane o.
    for (int64_t o = 0; o < ocb; ++o) {
      const int64_t oc = obk * ocb + o;
      const bool inside = oc < M && ic < C;
      const float* src = w + (oc * C + ic) * kR * kR;
      for (int k = 0; k < kR * kR; ++k) g[k][o] = inside ? src[k] : 0.f;
    }
    // tmp = g G^T (each kernel row against G's rows), then U = G tmp, as oneDNN sums them.
    for (int kh = 0; kh < kR; ++kh)
      for (int j = 0; j < alpha; ++j) {
        const float gj0 = G[j][0], gj1 = G[j][1], gj2 = G[j][2];
        for (int64_t o = 0; o < ocb; ++o)
          tmp[kh][j][o] = g[kh * kR + 0][o] * gj0 + g[kh * kR + 1][o] * gj1 +
                          g[kh * kR + 2][o] * gj2;
      }
    for (int a = 0; a < alpha; ++a) {
      // In locals: `out` could alias G as far as the compiler knows.
      const float ga0 = G[a][0], ga1 = G[a][1], ga2 = G[a][2];
      for (int j = 0; j < alpha; ++j) {
        float* __restrict u = out + offset(a, j, ic, obk);  // ocb contiguous floats
        for (int64_t o = 0; o < ocb; ++o)
          u[o] = ga0 * tmp[0][j][o] + ga1 * tmp[1][j][o] + ga2 * tmp[2][j][o];
      }
    }
  }
}

}  // namespace

void transform_winograd_weights(const float* w, int64_t M, int64_t C,
                                const dnnl::memory::desc& to, float* out, int threads) {
  const dnnl_wino_desc_t& d = *wino_of(to);
  const int alpha = d.alpha;
  const float(*G)[kR] = alpha == 6 ? kG4 : kG2;
  const int64_t ocb = d.oc_block, nb_oc = d.oc / ocb, nb_ic = d.ic / d.ic_block;
  const int64_t ic2 = d.wino_format == dnnl_wino_wei_OBaaIBOIio ? d.ic2_block : 1;
  const WinoOffsets offset{d, alpha, nb_oc, nb_ic, nb_oc / d.oc2_block, nb_ic / ic2};
  // Anything the layout holds beyond the transformed values (alignment) is zero.
  const size_t written = static_cast<size_t>(alpha * alpha) * static_cast<size_t>(d.oc) *
                         static_cast<size_t>(d.ic) * sizeof(float);
  if (to.get_size() > written)
    std::memset(reinterpret_cast<char*>(out) + written, 0, to.get_size() - written);
  // One task per (output block, input block): it writes the output block's oc_block floats for
  // each of its input channels at each (u_h, u_w), which no other task writes.
  // oneDNN 2.6's AVX-512 Winograd kernels use 16-wide output blocks.
  auto* block = ocb == 16 ? &transform_block<16> : &transform_block<0>;
  parallel_for(nb_oc * nb_ic, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t obk = t / nb_ic, ibk = t % nb_ic;
      block(w, M, C, offset, G, alpha, ocb, obk, ibk * d.ic_block, (ibk + 1) * d.ic_block, out);
    }
  });
}

}  // namespace onyx::cpu
