// The fused activation and our own direct convolution loops: double, and shapes oneDNN cannot
// express (negative pads). The geometry is kernels/window_geometry.cpp.
#include <algorithm>
#include <limits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/window.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// [lo, hi) of positions p in [0, n_out) with p * s + off in [0, n_in).
std::pair<int64_t, int64_t> valid_range(int64_t off, int64_t s, int64_t n_in, int64_t n_out) {
  int64_t lo = std::max<int64_t>(0, floor_div(-off + s - 1, s));
  int64_t hi = std::min<int64_t>(n_out, floor_div(n_in - 1 - off, s) + 1);
  return {lo, std::max(lo, hi)};
}

}  // namespace

Activation Activation::from_node(const Node& n) {
  Activation a;
  static_cast<ConvActivationParams&>(a) = parse_conv_activation(n);
  return a;
}

void Activation::append_to(dnnl::post_ops& po) const {
  using alg = dnnl::algorithm;
  switch (kind) {
    case Kind::None:
      break;
    case Kind::Relu:
      po.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
      break;
    case Kind::LeakyRelu:
      po.append_eltwise(1.0f, alg::eltwise_relu, alpha, 0.0f);
      break;
    case Kind::Sigmoid:
      po.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f);
      break;
    case Kind::Tanh:
      po.append_eltwise(1.0f, alg::eltwise_tanh, 0.0f, 0.0f);
      break;
    case Kind::Clip:
      po.append_eltwise(1.0f, alg::eltwise_clip, alpha, beta);
      break;
    case Kind::HardSigmoid:  // oneDNN 2.6 has no hardsigmoid: linear, then clip to [0, 1]
      po.append_eltwise(1.0f, alg::eltwise_linear, alpha, beta);
      po.append_eltwise(1.0f, alg::eltwise_clip, 0.0f, 1.0f);
      break;
  }
}

void conv_epilogue(Tensor& Y, const Tensor* Z, const Activation& act, int threads) {
  if (!Z && act.kind == Activation::Kind::None) return;
  dispatch<FloatTypes>(Y.dtype(), "Conv", [&]<typename T>() {
    using Acc = acc_t<T>;
    T* y = Y.data<T>();
    const T* z = Z ? Z->data<T>() : nullptr;
    parallel_for(Y.numel(), threads, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Acc v = static_cast<Acc>(y[i]);
        if (z) v += static_cast<Acc>(z[i]);
        y[i] = static_cast<T>(act.apply(v));
      }
    });
  });
}

void conv_fill_bias(Tensor& Y, const Tensor* B, int64_t M, int64_t block) {
  dispatch<FloatTypes>(Y.dtype(), "Conv", [&]<typename T>() {
    T* y = Y.data<T>();
    const int64_t plane =
        Y.rank() <= 2
            ? 1
            : shape_numel(Shape(Y.shape().begin() + 2, Y.shape().end() - (block > 0 ? 1 : 0)));
    for (int64_t i = 0; i < Y.numel(); ++i) {
      int64_t c =
          block > 0 ? (i / (plane * block)) % Y.dim(1) * block + i % block : (i / plane) % M;
      y[i] = B && c < M ? B->data<T>()[c] : T(0.0f);
    }
  });
}

namespace {

/// A Geometry's spatial vectors padded to 3 dims, and the plane sizes, for the loop nests below.
struct Loops3 {
  std::array<int64_t, 3> I, O, K, S, D, P;
  int64_t in_sz, out_sz, k_sz;
  explicit Loops3(const Geometry& g)
      : I(pad3(g.in, 1)), O(pad3(g.out, 1)), K(pad3(g.k, 1)), S(pad3(g.stride, 1)),
        D(pad3(g.dil, 1)), P(pad3(g.pad_l, 0)), in_sz(I[0] * I[1] * I[2]),
        out_sz(O[0] * O[1] * O[2]), k_sz(K[0] * K[1] * K[2]) {}
};

/// Direct convolution, parallel over (image, output channel).
template <typename T>
void conv_loops(const Geometry& g, const T* x, const T* w, const T* bias, T* y, int threads) {
  using Acc = acc_t<T>;
  const Loops3 L(g);
  const auto &I = L.I, &O = L.O, &K = L.K, &S = L.S, &D = L.D, &P = L.P;
  const int64_t in_sz = L.in_sz, out_sz = L.out_sz, k_sz = L.k_sz, Cg = g.C / g.G, Mg = g.M / g.G;
  parallel_for(g.N * g.M, threads, 1, [&](int64_t b, int64_t e) {
    std::vector<Acc> acc(out_sz);
    for (int64_t nm = b; nm < e; ++nm) {
      int64_t n = nm / g.M, m = nm % g.M, grp = m / Mg;
      std::fill(acc.begin(), acc.end(), bias ? static_cast<Acc>(bias[m]) : Acc(0));
      for (int64_t c = 0; c < Cg; ++c) {
        const T* xp = x + (n * g.C + grp * Cg + c) * in_sz;
        const T* wp = w + (m * Cg + c) * k_sz;
        for (int64_t kd = 0; kd < K[0]; ++kd)
          for (int64_t kh = 0; kh < K[1]; ++kh)
            for (int64_t kw = 0; kw < K[2]; ++kw) {
              Acc wv = static_cast<Acc>(wp[(kd * K[1] + kh) * K[2] + kw]);
              auto [d0, d1] = valid_range(kd * D[0] - P[0], S[0], I[0], O[0]);
              auto [h0, h1] = valid_range(kh * D[1] - P[1], S[1], I[1], O[1]);
              auto [w0, w1] = valid_range(kw * D[2] - P[2], S[2], I[2], O[2]);
              for (int64_t od = d0; od < d1; ++od)
                for (int64_t oh = h0; oh < h1; ++oh) {
                  const T* xr =
                      xp +
                      ((od * S[0] + kd * D[0] - P[0]) * I[1] + (oh * S[1] + kh * D[1] - P[1])) *
                          I[2] +
                      kw * D[2] - P[2];
                  Acc* ar = acc.data() + (od * O[1] + oh) * O[2];
                  for (int64_t ow = w0; ow < w1; ++ow)
                    ar[ow] += wv * static_cast<Acc>(xr[ow * S[2]]);
                }
            }
      }
      T* yp = y + nm * out_sz;
      for (int64_t i = 0; i < out_sz; ++i) yp[i] = static_cast<T>(acc[i]);
    }
  });
}

/// Direct transposed convolution.
template <typename T>
void conv_transpose_loops(const Geometry& g, const T* x, const T* w, const T* bias, T* y,
                          int threads) {
  using Acc = acc_t<T>;
  const Loops3 L(g);
  const auto &I = L.I, &O = L.O, &K = L.K, &S = L.S, &D = L.D, &P = L.P;
  const int64_t in_sz = L.in_sz, out_sz = L.out_sz, k_sz = L.k_sz, Cg = g.C / g.G, Mg = g.M / g.G;
  // Each input pixel scatters into the output plane of one output channel, so (image, output
  // channel) pairs run in parallel without races.
  parallel_for(g.N * g.M, threads, 1, [&](int64_t b, int64_t e) {
    std::vector<Acc> acc(out_sz);
    for (int64_t nm = b; nm < e; ++nm) {
      int64_t n = nm / g.M, m = nm % g.M, grp = m / Mg, mo = m % Mg;
      std::fill(acc.begin(), acc.end(), bias ? static_cast<Acc>(bias[m]) : Acc(0));
      for (int64_t c = 0; c < Cg; ++c) {
        const T* xp = x + (n * g.C + grp * Cg + c) * in_sz;
        const T* wp = w + ((grp * Cg + c) * Mg + mo) * k_sz;
        for (int64_t kd = 0; kd < K[0]; ++kd)
          for (int64_t kh = 0; kh < K[1]; ++kh)
            for (int64_t kw = 0; kw < K[2]; ++kw) {
              Acc wv = static_cast<Acc>(wp[(kd * K[1] + kh) * K[2] + kw]);
              auto [d0, d1] = valid_range(kd * D[0] - P[0], S[0], O[0], I[0]);
              auto [h0, h1] = valid_range(kh * D[1] - P[1], S[1], O[1], I[1]);
              auto [w0, w1] = valid_range(kw * D[2] - P[2], S[2], O[2], I[2]);
              for (int64_t id = d0; id < d1; ++id)
                for (int64_t ih = h0; ih < h1; ++ih) {
                  const T* xr = xp + (id * I[1] + ih) * I[2];
                  Acc* ar =
                      acc.data() +
                      ((id * S[0] + kd * D[0] - P[0]) * O[1] + (ih * S[1] + kh * D[1] - P[1])) *
                          O[2] +
                      kw * D[2] - P[2];
                  for (int64_t iw = w0; iw < w1; ++iw)
                    ar[iw * S[2]] += wv * static_cast<Acc>(xr[iw]);
                }
            }
      }
      T* yp = y + nm * out_sz;
      for (int64_t i = 0; i < out_sz; ++i) yp[i] = static_cast<T>(acc[i]);
    }
  });
}

}  // namespace

void ref_conv(const Geometry& g, const Tensor& X, const Tensor& W, const Tensor* B, Tensor& Y,
              bool transpose, int threads) {
  dispatch<FloatTypes>(X.dtype(), "Conv", [&]<typename T>() {
    const T* b = B ? B->data<T>() : nullptr;
    if (transpose)
      conv_transpose_loops<T>(g, X.data<T>(), W.data<T>(), b, Y.data<T>(), threads);
    else
      conv_loops<T>(g, X.data<T>(), W.data<T>(), b, Y.data<T>(), threads);
  });
}

}  // namespace onyx::cpu
