// Conv and ConvTranspose (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad).
// float32 and the 16-bit floats run on oneDNN's convolution / deconvolution (cached per
// shape, constant weights reordered once); double and shapes oneDNN cannot express (e.g.
// negative pads from output_shape) run on our own direct loops.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// Attributes shared by Conv and ConvTranspose, parsed at session creation.
struct ConvAttrs {
  std::string auto_pad;
  Shape kernel_shape, strides, dilations, pads, output_padding, output_shape;
  int64_t group;
  explicit ConvAttrs(const Node& n)
      : auto_pad(n.attr_string("auto_pad", "NOTSET")),
        kernel_shape(n.attr_ints("kernel_shape")),
        strides(n.attr_ints("strides")),
        dilations(n.attr_ints("dilations")),
        pads(n.attr_ints("pads")),
        output_padding(n.attr_ints("output_padding")),
        output_shape(n.attr_ints("output_shape")),
        group(n.attr_int("group", 1)) {}
};

/// One run's geometry. Spatial vectors have `nsp` entries; pads may be negative only for
/// ConvTranspose with output_shape.
struct Geometry {
  int64_t N = 0, C = 0, M = 0, G = 1;  // batch, input channels, output channels, groups
  Shape in, out, k, stride, dil, pad_l, pad_r;
  size_t nsp() const { return in.size(); }
  /// The spatial vectors padded in front to 3 dims (for our own loops).
  static std::array<int64_t, 3> pad3(const Shape& v, int64_t fill) {
    std::array<int64_t, 3> r{fill, fill, fill};
    std::copy(v.begin(), v.end(), r.begin() + (3 - v.size()));
    return r;
  }
};

/// Checks X and W and fills what both ops share: spatial sizes, kernel, strides, dilations.
Geometry base_geometry(KernelContext& ctx, const ConvAttrs& a, const Tensor& X, const Tensor& W,
                       bool transpose) {
  ONYX_CHECK(X.rank() >= 3 && X.rank() <= 5, "[{}] X must have rank 3, 4 or 5, got shape {}",
             ctx.label(), shape_str(X.shape()));
  ONYX_CHECK(W.rank() == X.rank(), "[{}] W must have the rank of X ({}), got shape {}", ctx.label(),
             X.rank(), shape_str(W.shape()));
  ONYX_CHECK(W.dtype() == X.dtype(), "[{}] X and W must have one dtype, got {} and {}", ctx.label(),
             dtype_name(X.dtype()), dtype_name(W.dtype()));
  Geometry g;
  size_t nsp = X.rank() - 2;
  g.N = X.dim(0);
  g.C = X.dim(1);
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
        ctx.label(), shape_str(W.shape()), shape_str(X.shape()), g.G, g.C / g.G);
  }
  g.in.assign(X.shape().begin() + 2, X.shape().end());
  g.k.assign(W.shape().begin() + 2, W.shape().end());
  ONYX_CHECK(a.kernel_shape.empty() || a.kernel_shape == g.k,
             "[{}] kernel_shape {} differs from W's spatial dims {}", ctx.label(),
             shape_str(a.kernel_shape), shape_str(g.k));
  g.stride = a.strides.empty() ? Shape(nsp, 1) : a.strides;
  g.dil = a.dilations.empty() ? Shape(nsp, 1) : a.dilations;
  ONYX_CHECK(
      g.stride.size() == nsp && g.dil.size() == nsp && (a.pads.empty() || a.pads.size() == 2 * nsp),
      "[{}] strides {}, dilations {} or pads {} do not fit {} spatial dims", ctx.label(),
      shape_str(a.strides), shape_str(a.dilations), shape_str(a.pads), nsp);
  for (size_t i = 0; i < nsp; ++i)
    ONYX_CHECK(g.stride[i] >= 1 && g.dil[i] >= 1, "[{}] strides and dilations must be >= 1",
               ctx.label());
  return g;
}

Geometry conv_geometry(KernelContext& ctx, const ConvAttrs& a, const Tensor& X, const Tensor& W) {
  Geometry g = base_geometry(ctx, a, X, W, false);
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
               ctx.label(), shape_str(g.k), shape_str(X.shape()));
    g.out[i] = span / g.stride[i] + 1;
  }
  return g;
}

Geometry conv_transpose_geometry(KernelContext& ctx, const ConvAttrs& a, const Tensor& X,
                                 const Tensor& W) {
  Geometry g = base_geometry(ctx, a, X, W, true);
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
               shape_str(X.shape()), shape_str(W.shape()));
  }
  return g;
}

/// [lo, hi) of positions p in [0, n_out) with p * s + off in [0, n_in).
std::pair<int64_t, int64_t> valid_range(int64_t off, int64_t s, int64_t n_in, int64_t n_out) {
  int64_t lo = std::max<int64_t>(0, floor_div(-off + s - 1, s));
  int64_t hi = std::min<int64_t>(n_out, floor_div(n_in - 1 - off, s) + 1);
  return {lo, std::max(lo, hi)};
}

/// Direct convolution, parallel over (image, output channel); accumulates in acc_t<T>.
template <typename T>
void ref_conv(const Geometry& g, const T* x, const T* w, const T* bias, T* y, int threads) {
  using Acc = acc_t<T>;
  auto I = Geometry::pad3(g.in, 1), O = Geometry::pad3(g.out, 1), K = Geometry::pad3(g.k, 1),
       S = Geometry::pad3(g.stride, 1), D = Geometry::pad3(g.dil, 1),
       P = Geometry::pad3(g.pad_l, 0);
  int64_t in_sz = I[0] * I[1] * I[2], out_sz = O[0] * O[1] * O[2], k_sz = K[0] * K[1] * K[2];
  int64_t Cg = g.C / g.G, Mg = g.M / g.G;
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

/// Direct transposed convolution: each input pixel scatters into the output plane of one
/// output channel, so (image, output channel) pairs run in parallel without races.
template <typename T>
void ref_conv_transpose(const Geometry& g, const T* x, const T* w, const T* bias, T* y,
                        int threads) {
  using Acc = acc_t<T>;
  auto I = Geometry::pad3(g.in, 1), O = Geometry::pad3(g.out, 1), K = Geometry::pad3(g.k, 1),
       S = Geometry::pad3(g.stride, 1), D = Geometry::pad3(g.dil, 1),
       P = Geometry::pad3(g.pad_l, 0);
  int64_t in_sz = I[0] * I[1] * I[2], out_sz = O[0] * O[1] * O[2], k_sz = K[0] * K[1] * K[2];
  int64_t Cg = g.C / g.G, Mg = g.M / g.G;
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

/// A oneDNN (de)convolution with the reorders between our plain layouts and its own.
struct ConvEntry {
  bool ok = false;
  DataType run_dt = DataType::Float;
  du::Prim prim;
  std::optional<du::Prim> src_r, wei_r, dst_r;
  dnnl::memory::desc src_u, wei_u, dst_u, bias_u, src_p, wei_p, dst_p;
  /// Weights already in the primitive's layout, when W is a constant.
  struct Packed {
    std::mutex mu;
    Tensor w;
  };
  std::shared_ptr<Packed> packed = std::make_shared<Packed>();
};

template <typename P, typename PD>
void finish_entry(ConvEntry& e, const PD& pd) {
  e.prim = du::make_prim<P>(pd);
  e.src_p = pd.src_desc();
  e.wei_p = pd.weights_desc();
  e.dst_p = pd.dst_desc();
  if (e.src_p != e.src_u) e.src_r = du::make_reorder(e.src_u, e.src_p);
  if (e.wei_p != e.wei_u) e.wei_r = du::make_reorder(e.wei_u, e.wei_p);
  if (e.dst_p != e.dst_u) e.dst_r = du::make_reorder(e.dst_p, e.dst_u);
  e.ok = true;
}

/// Builds the entry for a convolution (`transpose` false) or deconvolution.
ConvEntry make_conv_entry(const Geometry& g, DataType dt, bool has_bias, bool transpose) {
  ConvEntry e;
  using tag = dnnl::memory::format_tag;
  dnnl::memory::dims strides(g.stride.begin(), g.stride.end()), dil,
      pl(g.pad_l.begin(), g.pad_l.end()), pr(g.pad_r.begin(), g.pad_r.end());
  for (int64_t d : g.dil) dil.push_back(d - 1);
  Shape src{g.N, g.C}, dst{g.N, g.M};
  src.insert(src.end(), g.in.begin(), g.in.end());
  dst.insert(dst.end(), g.out.begin(), g.out.end());
  int64_t k_sz = shape_numel(g.k), Cg = g.C / g.G, Mg = g.M / g.G;
  // oneDNN's weights are [G,] O, I, k...; ours are [M, C/G, k] (Conv) or [C, M/G, k]
  // (ConvTranspose).
  Shape wdims, wstrides;
  if (g.G > 1) wdims.push_back(g.G), wstrides.push_back(Cg * Mg * k_sz);
  wdims.insert(wdims.end(), {g.G > 1 ? Mg : g.M, g.G > 1 ? Cg : g.C});
  if (transpose)
    wstrides.insert(wstrides.end(), {k_sz, Mg * k_sz});
  else
    wstrides.insert(wstrides.end(), {Cg * k_sz, k_sz});
  wdims.insert(wdims.end(), g.k.begin(), g.k.end());
  Shape kstr(g.k.size(), 1);
  for (int i = static_cast<int>(g.k.size()) - 2; i >= 0; --i) kstr[i] = kstr[i + 1] * g.k[i + 1];
  wstrides.insert(wstrides.end(), kstr.begin(), kstr.end());

  for (DataType run : {dt, DataType::Float}) {
    try {
      auto d = du::to_dnnl(run);
      e.src_u = du::plain_desc(src, run);
      e.dst_u = du::plain_desc(dst, run);
      e.wei_u = du::strided_desc(wdims, run, wstrides);
      e.bias_u = has_bias ? du::plain_desc({g.M}, run) : dnnl::memory::desc();
      dnnl::memory::desc src_a(du::to_dims(src), d, tag::any), dst_a(du::to_dims(dst), d, tag::any),
          wei_a(du::to_dims(wdims), d, tag::any);
      auto prop = dnnl::prop_kind::forward_inference;
      if (transpose) {
        dnnl::deconvolution_forward::desc desc(prop, dnnl::algorithm::deconvolution_direct, src_a,
                                               wei_a, e.bias_u, dst_a, strides, dil, pl, pr);
        dnnl::deconvolution_forward::primitive_desc pd(desc, du::scratch_attr(), du::engine());
        if (run != DataType::Float && du::is_reference_impl(pd)) continue;
        finish_entry<dnnl::deconvolution_forward>(e, pd);
      } else {
        dnnl::convolution_forward::desc desc(prop, dnnl::algorithm::convolution_direct, src_a,
                                             wei_a, e.bias_u, dst_a, strides, dil, pl, pr);
        dnnl::convolution_forward::primitive_desc pd(desc, du::scratch_attr(), du::engine());
        if (run != DataType::Float && du::is_reference_impl(pd)) continue;
        finish_entry<dnnl::convolution_forward>(e, pd);
      }
      e.run_dt = run;
      return e;
    } catch (const dnnl::error&) {
      e = ConvEntry{};
    }
    if (run == DataType::Float) break;
  }
  return e;
}

/// Runs a ConvEntry: reorders in, (de)convolution, reorder out; converts 16-bit floats when
/// the primitive runs in float32.
void run_entry(KernelContext& ctx, const ConvEntry& e, const Tensor& X, const Tensor& W,
               const Tensor* B, Tensor& Y, bool const_weights) {
  DataType dt = X.dtype();
  bool conv = e.run_dt != dt;
  Tensor x = conv ? du::to_float32(ctx, X) : X;
  Tensor b = B && conv ? du::to_float32(ctx, *B) : (B ? *B : Tensor());
  Tensor y = conv ? ctx.scratch(DataType::Float, Y.shape()) : Y;

  dnnl::memory src = du::wrap(e.src_u, x.raw());
  Tensor src_buf, wei_buf, dst_buf;
  if (e.src_r) {
    src_buf = du::scratch_for(ctx, e.src_p);
    dnnl::memory to = du::wrap(e.src_p, src_buf.raw());
    du::execute(ctx, *e.src_r, {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, to}});
    src = to;
  }
  auto pack = [&](Tensor& buf, KernelContext& c, bool persistent) {
    Tensor w = conv ? du::to_float32(c, W) : W;
    if (!e.wei_r) {
      buf = persistent ? w.clone() : w;
      return;
    }
    buf = persistent ? Tensor::empty(DataType::UInt8, {static_cast<int64_t>(e.wei_p.get_size())})
                     : du::scratch_for(c, e.wei_p);
    du::execute(
        c, *e.wei_r,
        {{DNNL_ARG_FROM, du::wrap(e.wei_u, w.raw())}, {DNNL_ARG_TO, du::wrap(e.wei_p, buf.raw())}});
  };
  if (const_weights) {
    std::lock_guard<std::mutex> lock(e.packed->mu);
    if (!e.packed->w.defined()) pack(e.packed->w, ctx, true);
    wei_buf = e.packed->w;
  } else {
    pack(wei_buf, ctx, false);
  }
  dnnl::memory wei = du::wrap(e.wei_r ? e.wei_p : e.wei_u, wei_buf.raw());
  dnnl::memory dst = du::wrap(e.dst_u, y.raw());
  if (e.dst_r) {
    dst_buf = du::scratch_for(ctx, e.dst_p);
    dst = du::wrap(e.dst_p, dst_buf.raw());
  }
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (B) args.emplace(DNNL_ARG_BIAS, du::wrap(e.bias_u, b.raw()));
  du::execute(ctx, e.prim, std::move(args));
  if (e.dst_r)
    du::execute(ctx, *e.dst_r, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, du::wrap(e.dst_u, y.raw())}});
  if (conv) du::from_float32(y, Y, ctx.threads());
}

/// Conv (transpose = false) and ConvTranspose share everything but geometry and loops.
class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, bool transpose)
      : attrs_(info.node),
        transpose_(transpose),
        const_weights_(info.constant_input(1) != nullptr) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& W = ctx.required_input(1);
    const Tensor* B = ctx.input(2);
    Geometry g =
        transpose_ ? conv_transpose_geometry(ctx, attrs_, X, W) : conv_geometry(ctx, attrs_, X, W);
    ONYX_CHECK(!B || (B->rank() == 1 && B->dim(0) == g.M && B->dtype() == X.dtype()),
               "[{}] B must be a 1-D {} tensor of {} values, got {} {}", ctx.label(),
               dtype_name(X.dtype()), g.M, B ? dtype_name(B->dtype()) : "",
               B ? shape_str(B->shape()) : "");
    Shape out{g.N, g.M};
    out.insert(out.end(), g.out.begin(), g.out.end());
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    if (Y.numel() == 0) return;
    if (X.numel() == 0 || W.numel() == 0) {
      fill_bias(Y, B, g);
      return;
    }
    bool pads_ok = std::all_of(g.pad_l.begin(), g.pad_l.end(), [](int64_t p) { return p >= 0; }) &&
                   std::all_of(g.pad_r.begin(), g.pad_r.end(), [](int64_t p) { return p >= 0; });
    if (X.dtype() != DataType::Double && pads_ok) {
      du::ThreadScope threads(ctx.threads());
      du::PrimitiveCache<ConvEntry>::Key key{static_cast<int64_t>(X.dtype()), ctx.threads(),
                                             B != nullptr};
      key.insert(key.end(), X.shape().begin(), X.shape().end());
      key.insert(key.end(), W.shape().begin(), W.shape().end());
      auto e =
          cache_.get(key, [&] { return make_conv_entry(g, X.dtype(), B != nullptr, transpose_); });
      if (e->ok) {
        run_entry(ctx, *e, X, W, B, Y, const_weights_);
        return;
      }
    }
    dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
      const T* b = B ? B->data<T>() : nullptr;
      if (transpose_)
        ref_conv_transpose<T>(g, X.data<T>(), W.data<T>(), b, Y.data<T>(), ctx.threads());
      else
        ref_conv<T>(g, X.data<T>(), W.data<T>(), b, Y.data<T>(), ctx.threads());
    });
  }

 private:
  static void fill_bias(Tensor& Y, const Tensor* B, const Geometry& g) {
    dispatch<FloatTypes>(Y.dtype(), "Conv", [&]<typename T>() {
      T* y = Y.data<T>();
      int64_t plane = shape_numel(g.out);
      for (int64_t i = 0; i < Y.numel(); ++i) y[i] = B ? B->data<T>()[(i / plane) % g.M] : T(0.0f);
    });
  }

  ConvAttrs attrs_;
  bool transpose_, const_weights_;
  du::PrimitiveCache<ConvEntry> cache_;
};

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  r.add({.op_type = "Conv",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<ConvKernel>(i, false);
         }});
  r.add({.op_type = "ConvTranspose",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<ConvKernel>(i, true);
         }});
}

}  // namespace onyx::cpu
