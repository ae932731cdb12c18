// MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, and the blocked-layout
// MaxPoolNchwc / GlobalAveragePoolNchwc of the NCHWc pass (domain ai.onyx). Float pooling runs on
// oneDNN where its padding rules match ONNX's (ceil_mode and count_include_pad expressed as
// extra right padding); Indices, dilated averages, LpPool, double and integers run on our
// own loops, which follow the ONNX reference exactly.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/window.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

enum class PoolKind { Max, Avg, Lp };

/// [k0, k1): the taps k in [0, K) whose position base + k * D lies in [lo, hi). Window loops
/// visit only these, so a kernel far larger than the input (kernel_shape 2^40 with SAME
/// padding, legal ONNX) costs its in-input taps rather than 2^40 iterations.
inline std::pair<int64_t, int64_t> tap_range(int64_t base, int64_t D, int64_t K, int64_t lo,
                                             int64_t hi) {
  auto fdiv = [](int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); };
  const int64_t k0 = std::max<int64_t>(0, -fdiv(base - lo, D));  // ceil((lo - base) / D)
  const int64_t k1 = std::min<int64_t>(K, fdiv(hi - 1 - base, D) + 1);
  return {k0, std::max(k0, k1)};
}

/// Max pooling as one pass per axis (w, then h, then d): a window's maximum is the maximum over
/// d of the maxima over h of the maxima over w, so an output costs KD + KH + KW comparisons
/// instead of KD * KH * KW (a 60 x 43 dilated window over a 1000 x 1000 uint8 image took 1.2 s
/// in the direct loop, 40 s under ASan: a fuzzer timeout). Strict > in tap order keeps, at each
/// pass, the first maximum, so the result and its index are the direct loop's first maximum in
/// (d, h, w) order, NaN included. An axis whose window lies in the padding gives -1 everywhere.
/// False (nothing done) when the per-plane intermediates would be much larger than the plane's
/// input and output (huge pads along w, say): the direct loop takes no extra memory.
template <typename T>
bool separable_max_pool(const PoolGeometry& g, const PoolAttrs& a, const T* x, T* y,
                        int64_t* indices, int threads) {
  const auto I = pad3(g.in, 1), O = pad3(g.out, 1), K = pad3(g.k, 1), S = pad3(g.stride, 1),
             D = pad3(g.dil, 1), PL = pad3(g.pad_l, 0);
  const int64_t in_sz = I[0] * I[1] * I[2], out_sz = O[0] * O[1] * O[2];
  const double extra = double(I[0]) * double(I[1]) * double(O[2]) + double(I[0]) * double(O[1]) * double(O[2]);
  if (extra > 4.0 * double(in_sz + out_sz)) return false;
  parallel_for(g.N * g.C, threads, 1, [&](int64_t b, int64_t e) {
    // dims after each pass: [I0, I1, O2], [I0, O1, O2], [O0, O1, O2].
    std::vector<T> v1(static_cast<size_t>(I[0] * I[1] * O[2])), v2(static_cast<size_t>(I[0] * O[1] * O[2]));
    std::vector<int64_t> i1(v1.size()), i2(v2.size()), i3(static_cast<size_t>(out_sz));
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = x + plane * in_sz;
      T* yp = y + plane * out_sz;
      // One pass along `ax` of a [n0, n1, n2] block (n[ax] input positions) into [.., O[ax], ..];
      // `src_idx` null means the source is x itself (its in-plane offsets are the indices).
      auto pass = [&](int ax, std::array<int64_t, 3> n, const T* src, const int64_t* src_idx, T* dst,
                      int64_t* dst_idx) {
        std::array<int64_t, 3> m = n;
        m[ax] = O[ax];
        const std::array<int64_t, 3> ss{n[1] * n[2], n[2], 1};
        for (int64_t p0 = 0; p0 < m[0]; ++p0)
          for (int64_t p1 = 0; p1 < m[1]; ++p1)
            for (int64_t p2 = 0; p2 < m[2]; ++p2) {
              std::array<int64_t, 3> q{p0, p1, p2};
              const int64_t base = q[ax] * S[ax] - PL[ax];
              const auto r = tap_range(base, D[ax], K[ax], 0, I[ax]);
              T best = std::numeric_limits<T>::lowest();
              int64_t best_i = -1;
              bool taken = false;
              for (int64_t k = r.first; k < r.second; ++k) {
                q[ax] = base + k * D[ax];
                const int64_t si = q[0] * ss[0] + q[1] * ss[1] + q[2];
                const T v = src[si];
                if (!taken || v > best) best = v, best_i = src_idx ? src_idx[si] : si, taken = true;
              }
              const int64_t di = (p0 * m[1] + p1) * m[2] + p2;
              dst[di] = best;
              dst_idx[di] = best_i;
            }
      };
      pass(2, {I[0], I[1], I[2]}, xp, nullptr, v1.data(), i1.data());
      pass(1, {I[0], I[1], O[2]}, v1.data(), i1.data(), v2.data(), i2.data());
      pass(0, {I[0], O[1], O[2]}, v2.data(), i2.data(), yp, i3.data());
      if (!indices) continue;
      for (int64_t o = 0; o < out_sz; ++o) {
        const int64_t best_i = i3[o];
        const int64_t w = best_i % I[2], h = (best_i / I[2]) % I[1], d = best_i / (I[1] * I[2]);
        const int64_t si = a.column_major ? d + h * I[0] + w * I[0] * I[1] : best_i;
        indices[plane * out_sz + o] = best_i < 0 ? -1 : plane * in_sz + si;
      }
    }
  });
  return true;
}

/// Our own pooling over planes of (image, channel), following the ONNX reference: a window
/// tap counts when inside the input; with count_include_pad also when inside the pads.
template <typename T>
void ref_pool(const PoolGeometry& g, PoolKind kind, const PoolAttrs& a, const T* x, T* y,
              int64_t* indices, int threads) {
  if (kind == PoolKind::Max && separable_max_pool(g, a, x, y, indices, threads)) return;
  using Acc = std::conditional_t<std::is_floating_point_v<acc_t<T>>, acc_t<T>, double>;
  auto I = pad3(g.in, 1), O = pad3(g.out, 1), K = pad3(g.k, 1), S = pad3(g.stride, 1),
       D = pad3(g.dil, 1), PL = pad3(g.pad_l, 0), PR = pad3(g.pad_r, 0);
  int64_t in_sz = I[0] * I[1] * I[2], out_sz = O[0] * O[1] * O[2];
  double p = a.p;
  parallel_for(g.N * g.C, threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = x + plane * in_sz;
      for (int64_t od = 0; od < O[0]; ++od)
        for (int64_t oh = 0; oh < O[1]; ++oh)
          for (int64_t ow = 0; ow < O[2]; ++ow) {
            int64_t o = (od * O[1] + oh) * O[2] + ow;
            Acc sum = 0;
            T best = std::numeric_limits<T>::lowest();
            int64_t best_i = -1;
            double count = 1;  // taps in the pads may number 2^31 per axis
            // Taps inside the input are visited; those in the pads only counted.
            std::array<std::pair<int64_t, int64_t>, 3> in_r;
            const int64_t base[3] = {od * S[0] - PL[0], oh * S[1] - PL[1], ow * S[2] - PL[2]};
            for (int i = 0; i < 3; ++i) {
              auto pr = tap_range(base[i], D[i], K[i], -PL[i], I[i] + PR[i]);
              in_r[i] = tap_range(base[i], D[i], K[i], 0, I[i]);
              count *= double(a.count_include_pad ? pr.second - pr.first
                                                  : in_r[i].second - in_r[i].first);
            }
            for (int64_t kd = in_r[0].first; kd < in_r[0].second; ++kd) {
              int64_t id = base[0] + kd * D[0];
              for (int64_t kh = in_r[1].first; kh < in_r[1].second; ++kh) {
                int64_t ih = base[1] + kh * D[1];
                for (int64_t kw = in_r[2].first; kw < in_r[2].second; ++kw) {
                  int64_t iw = base[2] + kw * D[2];
                  int64_t xi = (id * I[1] + ih) * I[2] + iw;
                  T v = xp[xi];
                  if (kind == PoolKind::Max) {
                    if (best_i < 0 || v > best) best = v, best_i = xi;
                  } else if (kind == PoolKind::Avg) {
                    sum += static_cast<Acc>(v);
                  } else {
                    sum += std::pow(std::abs(static_cast<Acc>(v)), static_cast<Acc>(p));
                  }
                }
              }
            }
            T* yo = y + plane * out_sz + o;
            if (kind == PoolKind::Max) {
              *yo = best;
              if (indices) {
                int64_t w = best_i % I[2], h = (best_i / I[2]) % I[1], d = best_i / (I[1] * I[2]);
                int64_t si = a.column_major ? d + h * I[0] + w * I[0] * I[1] : best_i;
                indices[plane * out_sz + o] = best_i < 0 ? -1 : plane * in_sz + si;
              }
            } else if (kind == PoolKind::Avg) {
              *yo = static_cast<T>(count ? sum / static_cast<Acc>(count) : Acc(0));
            } else {
              *yo = static_cast<T>(std::pow(sum, static_cast<Acc>(1.0 / p)));
            }
          }
    }
  });
}

/// 2-D max pooling without dilation (float, and the 8-bit integers of quantized CNNs), plane
/// by plane: for each output row, the element-wise max of its input rows (contiguous, so it
/// vectorises), then each output's window over that one row. oneDNN's plain-NCHW pooling is a
/// scalar loop several times slower.
template <typename T>
void max_pool_2d(const PoolGeometry& g, const T* x, T* y, int threads) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.k[0], KW = g.k[1], SH = g.stride[0], SW = g.stride[1];
  const int64_t PT = g.pad_l[0], PL = g.pad_l[1];
  constexpr T kLowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                               : std::numeric_limits<T>::lowest();
  parallel_for(g.N * g.C, threads, 1, [&](int64_t b, int64_t e) {
    std::vector<T> col_max(static_cast<size_t>(W));
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = x + plane * H * W;
      T* yp = y + plane * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = std::max<int64_t>(0, oh * SH - PT),
                      h1 = std::min<int64_t>(H, oh * SH - PT + KH);
        T* __restrict v = col_max.data();
        if (h0 >= h1) {
          std::fill(v, v + W, kLowest);
        } else {
          std::copy(xp + h0 * W, xp + (h0 + 1) * W, v);
          for (int64_t ih = h0 + 1; ih < h1; ++ih) {
            const T* __restrict row = xp + ih * W;
            for (int64_t j = 0; j < W; ++j) v[j] = row[j] > v[j] ? row[j] : v[j];
          }
        }
        T* out = yp + oh * OW;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t j0 = ow * SW - PL;
          const int64_t k0 = std::max<int64_t>(0, -j0), k1 = std::min<int64_t>(KW, W - j0);
          T m = kLowest;
          for (int64_t k = k0; k < k1; ++k) m = v[j0 + k] > m ? v[j0 + k] : m;
          out[ow] = m;
        }
      }
    }
  });
}

/// 2-D max pooling that also writes Indices (the training graph's MaxPool, whose gradient
/// scatters through them): ref_pool's taps in ref_pool's order with its comparisons, so values
/// and indices are the same, but each window's in-bounds tap range is computed once instead of
/// testing every tap, and selects without branches. Row-major indices only.
template <typename T>
void max_pool_2d_indices(const PoolGeometry& g, const T* x, T* y, int64_t* indices, int threads) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.k[0], KW = g.k[1], SH = g.stride[0], SW = g.stride[1];
  const int64_t DH = g.dil[0], DW = g.dil[1], PT = g.pad_l[0], PL = g.pad_l[1];
  // Taps k in [lo, hi) with 0 <= start + k * d < n.
  auto tap_range = [](int64_t start, int64_t d, int64_t k, int64_t n) {
    int64_t lo = start < 0 ? (-start + d - 1) / d : 0;
    int64_t hi = start >= n ? 0 : std::min<int64_t>(k, (n - start + d - 1) / d);
    return std::pair<int64_t, int64_t>{lo, std::max(lo, hi)};
  };
  // Each column's tap range once for all rows and planes (two integer divisions an output
  // were most of this kernel's time: ResNet's stem, 16 x 64 planes of 16 x 16 outputs).
  std::vector<std::pair<int64_t, int64_t>> col_taps(static_cast<size_t>(OW));
  for (int64_t ow = 0; ow < OW; ++ow)
    col_taps[static_cast<size_t>(ow)] = tap_range(ow * SW - PL, DW, KW, W);
  parallel_for(g.N * g.C, threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const T* xp = x + plane * H * W;
      T* yp = y + plane * OH * OW;
      int64_t* ip = indices + plane * OH * OW;
      const int64_t base = plane * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = oh * SH - PT;
        const auto [kh0, kh1] = tap_range(h0, DH, KH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t w0 = ow * SW - PL;
          const auto [kw0, kw1] = col_taps[static_cast<size_t>(ow)];
          if (kh0 == kh1 || kw0 == kw1) {  // a window over padding only
            yp[oh * OW + ow] = std::numeric_limits<T>::lowest();
            ip[oh * OW + ow] = -1;
            continue;
          }
          // Start from the first tap, then select without branches: on real activations
          // "v > best" is a coin flip, and mispredicted branches cost more than the taps.
          int64_t best_i = (h0 + kh0 * DH) * W + w0 + kw0 * DW;
          T best = xp[best_i];
          for (int64_t kh = kh0; kh < kh1; ++kh) {
            const int64_t row = (h0 + kh * DH) * W + w0;
            for (int64_t kw = kw0; kw < kw1; ++kw) {
              const int64_t xi = row + kw * DW;
              const T v = xp[xi];
              const bool gt = v > best;
              best = gt ? v : best;
              best_i = gt ? xi : best_i;
            }
          }
          yp[oh * OW + ow] = best;
          ip[oh * OW + ow] = base + best_i;
        }
      }
    }
  });
}

struct PoolEntry {
  bool ok = false;
  DataType run_dt = DataType::Float;
  std::string why;  // why a 16-bit dt runs in float32 (empty when it runs natively)
  du::Prim prim;
  dnnl::memory::desc src, dst;
};

/// The pooling primitive on plain tensors, or (block != 0) on blocked or channels-last ones.
PoolEntry make_pool_entry(const PoolGeometry& g, DataType dt, dnnl::algorithm alg,
                          const dnnl::memory::dims& pad_r, int64_t block) {
  PoolEntry e;
  Shape src{g.N, g.C}, dst{g.N, g.C};
  src.insert(src.end(), g.in.begin(), g.in.end());
  dst.insert(dst.end(), g.out.begin(), g.out.end());
  dnnl::memory::dims strides(g.stride.begin(), g.stride.end()), kernel(g.k.begin(), g.k.end()),
      pl(g.pad_l.begin(), g.pad_l.end()), dil;
  for (int64_t d : g.dil) dil.push_back(d - 1);
  for (DataType run : {dt, DataType::Float}) {
    try {
      e.src = block ? du::blocked_desc(src, run, block) : du::plain_desc(src, run);
      e.dst = block ? du::blocked_desc(dst, run, block) : du::plain_desc(dst, run);
      dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, alg, e.src, e.dst,
                                          strides, kernel, dil, pl, pad_r);
      dnnl::pooling_v2_forward::primitive_desc pd(desc, du::scratch_attr(), du::engine());
      if (run != DataType::Float && du::is_reference_impl(pd)) {
        e.why = du::float32_fallback_why("pooling", dt, du::LowPrecisionGap::Reference);
        continue;
      }
      e.prim = du::make_prim<dnnl::pooling_v2_forward>(pd);
      e.run_dt = run;
      e.ok = true;
      return e;
    } catch (const dnnl::error&) {
      if (run != DataType::Float)
        e.why = du::float32_fallback_why("pooling", dt, du::LowPrecisionGap::None);
    }
    if (run == DataType::Float) break;
  }
  e.why = "oneDNN has no pooling for this geometry; onyx's own loops run it in float32";
  return e;
}

using MaxPoolTypes = TypeList<float, double, float16, bfloat16, int8_t, uint8_t>;

/// MaxPool, AveragePool, LpPool; with `block` (ai.onyx MaxPoolNchwc) a 2-D max pooling of
/// blocked [N, C/block, H, W, block] tensors (block 8 or 16) or channels-last [N, 1, H, W, C]
/// ones (block -1) on oneDNN.
class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, PoolKind kind, bool blocked)
      : attrs_(info, kind == PoolKind::Lp),
        kind_(kind),
        block_(blocked ? info.node.attr_int("block", 8) : 0) {
    ONYX_CHECK(!blocked || (du::is_layout_block(block_) && attrs_.kernel_shape.size() == 2),
               "[{}] expects a 2-D kernel_shape and block 8, 16 or -1 (channels-last), got {} and "
               "{}",
               info.label(), shape_str(attrs_.kernel_shape), block_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    if (block_ != 0) return compute_blocked(ctx, X);
    PoolGeometry g = pool_geometry(ctx, attrs_, X.shape());
    Shape out{g.N, g.C};
    out.insert(out.end(), g.out.begin(), g.out.end());
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    bool want_idx = kind_ == PoolKind::Max && ctx.num_outputs() > 1 && ctx.output_wanted(1);
    Tensor* idx = want_idx ? &ctx.allocate_output(1, DataType::Int64, out) : nullptr;
    if (Y.numel() == 0) return;
    if (!want_idx && kind_ == PoolKind::Max && g.in.size() == 2 && g.dil[0] == 1 && g.dil[1] == 1) {
      if (X.dtype() == DataType::Float) {
        max_pool_2d(g, X.data<float>(), Y.data<float>(), ctx.threads());
        return;
      }
      if (X.dtype() == DataType::UInt8) {
        max_pool_2d(g, X.data<uint8_t>(), Y.data<uint8_t>(), ctx.threads());
        return;
      }
      if (X.dtype() == DataType::Int8) {
        max_pool_2d(g, X.data<int8_t>(), Y.data<int8_t>(), ctx.threads());
        return;
      }
    }
    if (!want_idx && try_dnnl(ctx, g, X, Y, 0)) return;
    if (want_idx && g.in.size() == 2 && !attrs_.column_major) {
      dispatch<MaxPoolTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
        max_pool_2d_indices<T>(g, X.data<T>(), Y.data<T>(), idx->data<int64_t>(), ctx.threads());
      });
      return;
    }
    auto run = [&]<typename T>() {
      ref_pool<T>(g, kind_, attrs_, X.data<T>(), Y.data<T>(), idx ? idx->data<int64_t>() : nullptr,
                  ctx.threads());
    };
    if (kind_ == PoolKind::Max)
      dispatch<MaxPoolTypes>(X.dtype(), ctx.label(), run);
    else
      dispatch<FloatTypes>(X.dtype(), ctx.label(), run);
  }

 private:
  void compute_blocked(KernelContext& ctx, const Tensor& X) const {
    const bool last = block_ == du::kChannelsLast;
    ONYX_CHECK(X.rank() == 5 && X.dtype() == DataType::Float &&
                   (last ? X.dim(1) == 1 && X.dim(4) > 0 : X.dim(4) == block_),
               "[{}] X must be a {} float32 tensor, got {} {}", ctx.label(),
               last ? std::string("channels-last [N, 1, H, W, C]")
                    : fmt::format("blocked [N, C/{0}, H, W, {0}]", block_),
               dtype_name(X.dtype()), shape_str(X.shape()));
    const int64_t b = X.dim(4);
    PoolGeometry g = pool_geometry(ctx, attrs_, {X.dim(0), X.dim(1) * b, X.dim(2), X.dim(3)});
    Tensor& Y = ctx.allocate_output(0, X.dtype(), {g.N, X.dim(1), g.out[0], g.out[1], b});
    if (Y.numel() == 0) return;
    ONYX_CHECK(try_dnnl(ctx, g, X, Y, block_), "[{}] oneDNN cannot pool X {} with pads {}",
               ctx.label(), shape_str(X.shape()), shape_str(attrs_.pads));
  }

  bool try_dnnl(KernelContext& ctx, const PoolGeometry& g, const Tensor& X, Tensor& Y,
                int64_t block) const {
    DataType dt = X.dtype();
    if (kind_ == PoolKind::Lp ||
        !(dt == DataType::Float || dt == DataType::Float16 || dt == DataType::BFloat16))
      return false;
    bool dilated = std::any_of(g.dil.begin(), g.dil.end(), [](int64_t d) { return d != 1; });
    if (kind_ == PoolKind::Avg && dilated) return false;
    // Right padding that makes oneDNN produce exactly the ONNX output size.
    dnnl::memory::dims pr;
    bool extra = false;
    for (size_t i = 0; i < g.in.size(); ++i) {
      int64_t ek = (g.k[i] - 1) * g.dil[i] + 1;
      int64_t need = (g.out[i] - 1) * g.stride[i] + ek - g.in[i] - g.pad_l[i];
      int64_t r = std::max(g.pad_r[i], need);
      extra |= r != g.pad_r[i];
      if ((g.in[i] + g.pad_l[i] + r - ek) / g.stride[i] + 1 != g.out[i]) return false;
      pr.push_back(r);
    }
    // oneDNN would count the extra ceil_mode padding as padding.
    if (kind_ == PoolKind::Avg && attrs_.count_include_pad && extra) return false;
    dnnl::algorithm alg = kind_ == PoolKind::Max     ? dnnl::algorithm::pooling_max
                          : attrs_.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                     : dnnl::algorithm::pooling_avg_exclude_padding;
    du::ThreadScope threads(ctx.threads());
    du::PrimitiveCache<PoolEntry>::Key key{static_cast<int64_t>(dt), ctx.threads()};
    key.insert(key.end(), X.shape().begin(), X.shape().end());
    auto e = cache_.get(key, [&] { return make_pool_entry(g, dt, alg, pr, block); });
    if (dt != DataType::Float && e->run_dt != dt)
      du::note_slow_path(ctx.node().op_type, dt, e->why);
    if (!e->ok) return false;
    bool conv = e->run_dt != dt;
    Tensor x = conv ? du::to_float32(ctx, X) : X;
    Tensor y = conv ? ctx.scratch(DataType::Float, Y.shape()) : Y;
    du::execute(
        ctx, e->prim,
        {{DNNL_ARG_SRC, du::wrap(e->src, x.raw())}, {DNNL_ARG_DST, du::wrap(e->dst, y.raw())}});
    if (conv) du::from_float32(y, Y, ctx.threads());
    return true;
  }

  PoolAttrs attrs_;
  PoolKind kind_;
  int64_t block_;
  du::PrimitiveCache<PoolEntry> cache_;
};

/// GlobalAveragePool / GlobalMaxPool: one value per (image, channel) plane.
template <bool kMax>
void global_pool(KernelContext& ctx) {
  const Tensor& X = ctx.required_input(0);
  ONYX_CHECK(X.rank() >= 3, "[{}] X must have rank >= 3 ([N, C, spatial...]), got shape {}",
             ctx.label(), shape_str(X.shape()));
  Shape out(X.rank(), 1);
  out[0] = X.dim(0);
  out[1] = X.dim(1);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
  int64_t planes = X.dim(0) * X.dim(1), sz = X.numel() / std::max<int64_t>(planes, 1);
  dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
    using Acc = acc_t<T>;
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    parallel_for(planes, ctx.threads(), std::max<int64_t>(1, 32768 / std::max<int64_t>(sz, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t pl = b; pl < e; ++pl) {
                     Acc r = kMax ? -std::numeric_limits<Acc>::infinity() : Acc(0);
                     read_blocks(x + pl * sz, sz, [&](const Acc* xp, int64_t, int64_t m) {
                       for (int64_t i = 0; i < m; ++i) {
                         if constexpr (kMax)
                           r = std::max(r, xp[i]);
                         else
                           r += xp[i];
                       }
                     });
                     y[pl] = static_cast<T>(kMax ? r : r / static_cast<Acc>(sz));
                   }
                 });
  });
}

/// ai.onyx GlobalAveragePoolNchwc: blocked [N, C/b, H, W, b] in, plain [N, C, 1, 1] out
/// (attribute `channels`), so no reorder is needed after the last blocked convolution.
void global_avg_pool_nchwc(KernelContext& ctx, int64_t channels) {
  const Tensor& X = ctx.required_input(0);
  const int64_t b = X.rank() == 5 ? X.dim(4) : 0;
  ONYX_CHECK(X.dtype() == DataType::Float && b > 0 && X.dim(1) == (channels + b - 1) / b,
             "[{}] X must be a blocked float32 [N, ceil({}/b), H, W, b] tensor, got {} {}",
             ctx.label(), channels, dtype_name(X.dtype()), shape_str(X.shape()));
  const int64_t N = X.dim(0), CB = X.dim(1), HW = X.dim(2) * X.dim(3);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), {N, channels, 1, 1});
  const float* x = X.data<float>();
  float* y = Y.data<float>();
  parallel_for(N * CB, ctx.threads(), std::max<int64_t>(1, 4096 / std::max<int64_t>(HW * b, 1)),
               [&](int64_t lo, int64_t hi) {
                 std::vector<float> acc(static_cast<size_t>(b));
                 for (int64_t nc = lo; nc < hi; ++nc) {
                   const float* xp = x + nc * HW * b;
                   std::fill(acc.begin(), acc.end(), 0.0f);
                   for (int64_t i = 0; i < HW; ++i)
                     for (int64_t j = 0; j < b; ++j) acc[j] += xp[i * b + j];
                   const int64_t n = nc / CB, c0 = nc % CB * b;
                   for (int64_t j = 0; j < b && c0 + j < channels; ++j)
                     y[n * channels + c0 + j] = HW ? acc[j] / static_cast<float>(HW) : 0.0f;
                 }
               });
}

KernelFactory pool_factory(PoolKind kind, bool blocked = false) {
  return [kind, blocked](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(i, kind, blocked);
  };
}

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  auto max_types = float_types() + std::vector<DataType>{DataType::Int8, DataType::UInt8};
  r.add({.op_type = "MaxPool",
         .domain = "",
         .since = 1,
         .types = max_types,
         .create = pool_factory(PoolKind::Max)});
  r.add({.op_type = "AveragePool",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = pool_factory(PoolKind::Avg)});
  r.add({.op_type = "LpPool",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = pool_factory(PoolKind::Lp)});
  r.add({.op_type = "GlobalAveragePool",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = function_factory(global_pool<false>)});
  r.add({.op_type = "MaxPoolNchwc",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float},
         .create = pool_factory(PoolKind::Max, true)});
  r.add({.op_type = "GlobalAveragePoolNchwc",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           int64_t c = i.node.require_attr("channels", Attribute::Type::Int).i;
           return std::make_unique<FunctionKernel>(
               [c](KernelContext& ctx) { global_avg_pool_nchwc(ctx, c); });
         }});
  r.add({.op_type = "GlobalMaxPool",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = function_factory(global_pool<true>)});
}

}  // namespace onyx::cpu
