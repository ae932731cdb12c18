// Double convolutions as im2col + our blocked gemm (ref_gemm.h). oneDNN has no float64, and
// the direct loops (conv_ref.cpp) keep one output row in their innermost loop: ResNet's late
// stages (4x4 and 2x2 planes) and the weight gradient (a Conv whose output is the 3x3 kernel)
// leave it a few elements long, and `onyx gradcheck` on ResNet-18 spent 90 % of its time
// there. Here every (image, group) is one gemm of W [Mg, Cg*k] by the unfolded input
// [Cg*k, out]; a transposed convolution is the gemm W^T X [Mg*k, in] folded back (col2im).
#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/ref_gemm.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// Spatial vectors padded to 3 dims (a 1-D or 2-D convolution is a 3-D one with unit dims).
struct Dims3 {
  std::array<int64_t, 3> in, out, k, s, d, p;
  int64_t in_sz, out_sz, k_sz;
  explicit Dims3(const Geometry& g) {
    auto pad3 = [](const Shape& v, int64_t fill) {
      std::array<int64_t, 3> r{fill, fill, fill};
      std::copy(v.begin(), v.end(), r.end() - static_cast<std::ptrdiff_t>(v.size()));
      return r;
    };
    in = pad3(g.in, 1), out = pad3(g.out, 1), k = pad3(g.k, 1), s = pad3(g.stride, 1);
    d = pad3(g.dil, 1), p = pad3(g.pad_l, 0);
    in_sz = in[0] * in[1] * in[2], out_sz = out[0] * out[1] * out[2], k_sz = k[0] * k[1] * k[2];
  }
};

/// Calls fn(kernel offset, output position, input position) for every kernel tap `kk` and
/// output position whose input position o * s + k * d - p lies inside the input.
template <typename F>
void for_each_tap(const Dims3& a, int64_t kk, F&& fn) {
  const int64_t k0 = kk / (a.k[1] * a.k[2]), k1 = kk / a.k[2] % a.k[1], k2 = kk % a.k[2];
  for (int64_t o0 = 0; o0 < a.out[0]; ++o0) {
    const int64_t i0 = o0 * a.s[0] + k0 * a.d[0] - a.p[0];
    if (i0 < 0 || i0 >= a.in[0]) continue;
    for (int64_t o1 = 0; o1 < a.out[1]; ++o1) {
      const int64_t i1 = o1 * a.s[1] + k1 * a.d[1] - a.p[1];
      if (i1 < 0 || i1 >= a.in[1]) continue;
      const int64_t orow = (o0 * a.out[1] + o1) * a.out[2], irow = (i0 * a.in[1] + i1) * a.in[2];
      for (int64_t o2 = 0; o2 < a.out[2]; ++o2) {
        const int64_t i2 = o2 * a.s[2] + k2 * a.d[2] - a.p[2];
        if (i2 >= 0 && i2 < a.in[2]) fn(orow + o2, irow + i2);
      }
    }
  }
}

void conv(const Geometry& g, const double* x, const double* w, const double* bias, double* y,
          int threads) {
  const Dims3 a(g);
  const int64_t Cg = g.C / g.G, Mg = g.M / g.G, rows = Cg * a.k_sz;
  std::vector<double> col(static_cast<size_t>(rows * a.out_sz));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // col[(c, tap), o] = x[n, grp * Cg + c, o * s + tap * d - p], 0 in the padding.
      parallel_for(rows, threads, 8, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          double* cr = col.data() + r * a.out_sz;
          const double* xc = x + (n * g.C + grp * Cg + r / a.k_sz) * a.in_sz;
          std::fill(cr, cr + a.out_sz, 0.0);
          for_each_tap(a, r % a.k_sz, [&](int64_t o, int64_t i) { cr[o] = xc[i]; });
        }
      });
      double* yg = y + (n * g.M + grp * Mg) * a.out_sz;
      ref_gemm<double>(Mg, a.out_sz, rows, w + grp * Mg * rows, rows, 1, col.data(), a.out_sz, 1,
                       yg, threads);
      if (bias)
        for (int64_t m = 0; m < Mg; ++m) {
          double* ym = yg + m * a.out_sz;
          for (int64_t o = 0; o < a.out_sz; ++o) ym[o] += bias[grp * Mg + m];
        }
    }
}

/// ConvTranspose: X [N, C, in...] scatters through W [C, Mg, k...] into Y [N, M, out...]; in
/// the geometry, `in` is X's and `out` Y's plane, so taps map input i to output i * s + k * d - p.
void conv_transpose(const Geometry& g, const double* x, const double* w, const double* bias,
                    double* y, int threads) {
  // for_each_tap walks the plane it is given as "out" and checks the other's bounds: walk
  // the input plane (X) and land in Y.
  Geometry swapped = g;
  std::swap(swapped.in, swapped.out);
  const Dims3 a(swapped);
  const int64_t Cg = g.C / g.G, Mg = g.M / g.G, rows = Mg * a.k_sz;
  std::vector<double> col(static_cast<size_t>(rows * a.out_sz));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.G; ++grp) {
      // col[(m, tap), i] = sum_c W[grp * Cg + c, m, tap] * X[n, grp * Cg + c, i]
      ref_gemm<double>(rows, a.out_sz, Cg, w + grp * Cg * rows, 1, rows,
                       x + (n * g.C + grp * Cg) * a.out_sz, a.out_sz, 1, col.data(), threads);
      // Fold back, one output channel per task (no two tasks write the same element).
      parallel_for(Mg, threads, 1, [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) {
          double* ym = y + (n * g.M + grp * Mg + m) * a.in_sz;
          std::fill(ym, ym + a.in_sz, bias ? bias[grp * Mg + m] : 0.0);
          for (int64_t tap = 0; tap < a.k_sz; ++tap) {
            const double* cr = col.data() + (m * a.k_sz + tap) * a.out_sz;
            for_each_tap(a, tap, [&](int64_t i, int64_t o) { ym[o] += cr[i]; });
          }
        }
      });
    }
}

}  // namespace

void gemm_conv(const Geometry& g, const Tensor& X, const Tensor& W, const Tensor* B, Tensor& Y,
               bool transpose, int threads) {
  ONYX_CHECK(X.dtype() == DataType::Double, "[Conv] gemm_conv takes double tensors, got {}",
             dtype_name(X.dtype()));
  const double* b = B ? B->data<double>() : nullptr;
  if (transpose)
    conv_transpose(g, X.data<double>(), W.data<double>(), b, Y.data<double>(), threads);
  else
    conv(g, X.data<double>(), W.data<double>(), b, Y.data<double>(), threads);
}

}  // namespace onyx::cpu
