// Convolution geometry (ONNX's pads, auto_pad, output_shape rules), the fused activation, and
// our own direct loops: double, and shapes oneDNN cannot express (negative pads).
#include <algorithm>
#include <limits>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/window.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// Checks X and W and fills what both ops share: spatial sizes, kernel, strides, dilations.
Geometry base_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x, const Tensor& W,
                       bool transpose) {
  const int64_t rank = static_cast<int64_t>(x.size());
  ONYX_CHECK(rank >= 3 && rank <= 5, "[{}] X must have rank 3, 4 or 5, got shape {}", ctx.label(),
             shape_str(x));
  ONYX_CHECK(W.rank() == rank, "[{}] W must have the rank of X ({}), got shape {}", ctx.label(),
             rank, shape_str(W.shape()));
  Geometry g;
  size_t nsp = x.size() - 2;
  g.N = x[0];
  g.C = x[1];
  g.G = a.group;
  ONYX_CHECK(g.G >= 1 && g.C % g.G == 0, "[{}] group {} does not divide the {} input channels",
             ctx.label(), g.G, g.C);
  if (transpose) {
    ONYX_CHECK(W.dim(0) == g.C, "[{}] W {} must have {} input channels in dim 0", ctx.label(),
               shape_str(W.shape()), g.C);
    g.M = W.dim(1) * g.G;
  } else {
    g.M = W.dim(0);
    ONYX_CHECK(
        W.dim(1) * g.G == g.C && g.M % g.G == 0,
        "[{}] W {} does not fit X {} with group {}: expected [M, {}, ...] with M % group == 0",
        ctx.label(), shape_str(W.shape()), shape_str(x), g.G, g.C / g.G);
  }
  g.in.assign(x.begin() + 2, x.end());
  g.k.assign(W.shape().begin() + 2, W.shape().end());
  ONYX_CHECK(a.kernel_shape.empty() || a.kernel_shape == g.k,
             "[{}] kernel_shape {} differs from W's spatial dims {}", ctx.label(),
             shape_str(a.kernel_shape), shape_str(g.k));
  WindowSteps steps(ctx.label(), a.strides, a.dilations, a.pads, nsp);
  g.stride = std::move(steps.stride);
  g.dil = std::move(steps.dil);
  return g;
}

/// [lo, hi) of positions p in [0, n_out) with p * s + off in [0, n_in).
std::pair<int64_t, int64_t> valid_range(int64_t off, int64_t s, int64_t n_in, int64_t n_out) {
  int64_t lo = std::max<int64_t>(0, floor_div(-off + s - 1, s));
  int64_t hi = std::min<int64_t>(n_out, floor_div(n_in - 1 - off, s) + 1);
  return {lo, std::max(lo, hi)};
}

}  // namespace

ConvAttrs::ConvAttrs(const Node& n)
    : auto_pad(n.attr_string("auto_pad", "NOTSET")),
      kernel_shape(n.attr_ints("kernel_shape")),
      strides(n.attr_ints("strides")),
      dilations(n.attr_ints("dilations")),
      pads(n.attr_ints("pads")),
      output_padding(n.attr_ints("output_padding")),
      output_shape(n.attr_ints("output_shape")),
      group(n.attr_int("group", 1)) {}

bool Geometry::pads_nonnegative() const {
  auto ok = [](int64_t p) { return p >= 0; };
  return std::all_of(pad_l.begin(), pad_l.end(), ok) && std::all_of(pad_r.begin(), pad_r.end(), ok);
}

Geometry conv_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x, const Tensor& W) {
  Geometry g = base_geometry(ctx, a, x, W, false);
  size_t nsp = g.nsp();
  g.pad_l.assign(nsp, 0);
  g.pad_r.assign(nsp, 0);
  g.out.resize(nsp);
  for (size_t i = 0; i < nsp; ++i) {
    int64_t ek = (g.k[i] - 1) * g.dil[i] + 1;
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      int64_t o = (g.in[i] + g.stride[i] - 1) / g.stride[i];
      int64_t total = std::max<int64_t>(0, (o - 1) * g.stride[i] + ek - g.in[i]);
      g.pad_l[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_r[i] = total - g.pad_l[i];
    } else if (a.auto_pad != "VALID" && !a.pads.empty()) {
      g.pad_l[i] = a.pads[i];
      g.pad_r[i] = a.pads[i + nsp];
    }
    int64_t span = g.in[i] + g.pad_l[i] + g.pad_r[i] - ek;
    ONYX_CHECK(span >= 0, "[{}] kernel {} (dilated) is larger than the padded input {}",
               ctx.label(), shape_str(g.k), shape_str(x));
    g.out[i] = span / g.stride[i] + 1;
  }
  return g;
}

Geometry conv_transpose_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                                 const Tensor& W) {
  Geometry g = base_geometry(ctx, a, x, W, true);
  size_t nsp = g.nsp();
  Shape opad = a.output_padding.empty() ? Shape(nsp, 0) : a.output_padding;
  Shape oshape = a.output_shape;
  if (oshape.size() == nsp + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
  ONYX_CHECK(opad.size() == nsp && (oshape.empty() || oshape.size() == nsp),
             "[{}] output_padding {} or output_shape {} do not fit {} spatial dims", ctx.label(),
             shape_str(a.output_padding), shape_str(a.output_shape), nsp);
  g.pad_l.assign(nsp, 0);
  g.pad_r.assign(nsp, 0);
  g.out.resize(nsp);
  bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  for (size_t i = 0; i < nsp; ++i) {
    int64_t full = g.stride[i] * (g.in[i] - 1) + opad[i] + (g.k[i] - 1) * g.dil[i] + 1;
    if (!a.pads.empty() && a.auto_pad != "VALID") {
      g.pad_l[i] = a.pads[i];
      g.pad_r[i] = a.pads[i + nsp];
      g.out[i] = oshape.empty() ? full - g.pad_l[i] - g.pad_r[i] : oshape[i];
    } else if (same || !oshape.empty()) {
      g.out[i] = oshape.empty() ? g.in[i] * g.stride[i] : oshape[i];
      int64_t total = full - g.out[i];
      int64_t half = floor_div(total, 2);
      g.pad_l[i] = a.auto_pad == "SAME_UPPER" ? half : total - half;
    } else {
      g.out[i] = full;
    }
    g.pad_r[i] = full - g.out[i] - g.pad_l[i];
    ONYX_CHECK(g.out[i] >= 0, "[{}] negative output size for X {} and W {}", ctx.label(),
               shape_str(x), shape_str(W.shape()));
  }
  return g;
}

Activation Activation::from_node(const Node& n) {
  Activation a;
  std::string name = n.attr_string("activation", "");
  std::vector<float> p = n.attr_floats("activation_params");
  auto params = [&](size_t count, std::initializer_list<float> defaults) {
    ONYX_CHECK(p.empty() || p.size() == count,
               "[{}] activation {} takes {} activation_params, got {}", n.label(), name, count,
               p.size());
    std::vector<float> v = p.empty() ? std::vector<float>(defaults) : p;
    a.alpha = v[0];
    if (count > 1) a.beta = v[1];
  };
  if (name.empty()) {
    a.kind = Kind::None;
  } else if (name == "Relu") {
    a.kind = Kind::Relu;
  } else if (name == "LeakyRelu") {
    a.kind = Kind::LeakyRelu;
    params(1, {0.01f});
  } else if (name == "Sigmoid") {
    a.kind = Kind::Sigmoid;
  } else if (name == "Tanh") {
    a.kind = Kind::Tanh;
  } else if (name == "Clip") {
    a.kind = Kind::Clip;
    params(2, {std::numeric_limits<float>::lowest(), std::numeric_limits<float>::max()});
  } else if (name == "HardSigmoid") {
    a.kind = Kind::HardSigmoid;
    params(2, {0.2f, 0.5f});
  } else {
    ONYX_THROW(
        "[{}] activation '{}' is not supported (expected Relu, LeakyRelu, Sigmoid, Tanh, "
        "Clip or HardSigmoid)",
        n.label(), name);
  }
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
