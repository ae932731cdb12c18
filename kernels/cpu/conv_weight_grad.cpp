// ai.onyx ConvWeightGrad: the weight gradient of a convolution,
//   dW[g*Mg + m, c, k] = sum_{n, o} dY[n, g*Mg + m, o] * X[n, g*Cg + c, o*s + k*d - pl],
// which the optimizer puts in place of the Transpose / Conv / Slice / Transpose pattern the Conv
// gradient rule writes (inference/fusions_conv_grad.cpp). It runs on oneDNN, accumulating dW in
// float32: convolution_backward_weights with the transposes folded into its reorders or, on
// small outputs where that primitive is slow, im2col and a matmul.
// Inputs X [N, C, spatial...] and dY [N, M, spatial'...]; attributes kernel_shape, strides,
// dilations, pads, group and `to` (dW's dtype: X's, or float32 to absorb a Cast after it).
// Like the pattern's Slice, a kernel_shape beyond what the window can reach is clipped.
#include <cstring>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;

/// One run's geometry: spatial vectors have nsp entries. `in` is X's extent that some window
/// reaches (X is read through a view when rows at its end are never reached), and pad_r what
/// makes oneDNN's output size exactly dY's.
struct WgGeometry {
  int64_t N = 0, C = 0, M = 0, G = 1;
  Shape in, out, k, stride, dil, pad_l, pad_r;
  bool reads_nothing = false;  // no window reaches X (or N is 0): dW is zero
};

/// oneDNN primitives for one geometry: the backward-weights convolution reading X and dY in its
/// own layouts, or (`gemm`) a matmul dW = dY^T [M, N*O] x im2col(X) [N*O, C*K] writing dW in
/// place; with the reorders from and to our layouts.
struct WgEntry {
  bool ok = false, gemm = false;
  DataType run_dt = DataType::Float;  // the dtype X and dY are read in
  std::string why;                    // why 16-bit inputs run in float32
  du::Prim prim;
  std::optional<du::Prim> x_r, dy_r, dw_r;
  dnnl::memory::desc x_u, dy_u, dw_u, x_p, dy_p, dw_p;
};

/// Which formulation runs a geometry. oneDNN 2.6's backward-weights kernels are slow on small
/// outputs: on ResNet-18's 4x4 and 2x2 stages (batch 16, bf16 on AMX) they took 2-5x the time of
/// a convolution treating the batch as channels (13 vs 6 ms at 512 channels, 2x2), from 8x8 up
/// they won. There im2col has few rows (N*O) and a matmul writes dW in our layout directly.
bool use_gemm(const WgGeometry& g) { return g.G == 1 && shape_numel(g.out) < 64; }

/// Strides of a row-major tensor of `shape`.
Shape row_major(const Shape& shape) {
  Shape r(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) r[i] = r[i + 1] * shape[i + 1];
  return r;
}

Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

dnnl::memory::desc any(const Shape& d, DataType t) {
  return dnnl::memory::desc(du::to_dims(d), du::to_dnnl(t), dnnl::memory::format_tag::any);
}

/// The matmul of the gemm formulation; dY^T is a reorder of dY, im2col(X) our loop.
bool try_gemm(WgEntry& e, const WgGeometry& g, DataType run, DataType wdt) {
  const int64_t O = shape_numel(g.out), CK = g.C * shape_numel(g.k);
  if (wdt != DataType::Float) return false;  // dW straight into our float32 buffer
  e.dy_u = du::strided_desc({g.M, g.N, O}, run, {O, g.M * O, 1});
  e.dy_p = du::plain_desc({g.M, g.N * O}, run);
  e.x_p = du::plain_desc({g.N * O, CK}, run);
  e.dw_u = e.dw_p = du::plain_desc({g.M, CK}, DataType::Float);
  dnnl::matmul::desc desc(e.dy_p, e.x_p, e.dw_p);
  dnnl::matmul::primitive_desc pd(desc, du::scratch_attr(), du::engine());
  if (run != DataType::Float && du::is_reference_impl(pd)) return false;
  e.prim = du::make_prim<dnnl::matmul>(pd);
  e.dy_r = du::make_reorder(e.dy_u, du::plain_desc({g.M, g.N, O}, run));
  e.gemm = true;
  return true;
}

/// Builds the primitive reading X and dY in `run` and accumulating dW in `wdt`; false when
/// oneDNN offers only a reference implementation for 16-bit data. Throws dnnl::error when it
/// has none.
bool try_primitive(WgEntry& e, const WgGeometry& g, const Shape& x_shape, DataType run,
                   DataType wdt) {
  if (use_gemm(g)) return try_gemm(e, g, run, wdt);
  dnnl::memory::dims strides(g.stride.begin(), g.stride.end()), dil,
      pl(g.pad_l.begin(), g.pad_l.end()), pr(g.pad_r.begin(), g.pad_r.end());
  for (int64_t d : g.dil) dil.push_back(d - 1);
  // X cut to `in`; oneDNN's grouped weights [G, M/G, C/G, k...] are our [M, C/G, k...] bytes.
  Shape xd = concat({g.N, g.C}, g.in), yd = concat({g.N, g.M}, g.out),
        wd = concat(g.G > 1 ? Shape{g.G, g.M / g.G, g.C / g.G} : Shape{g.M, g.C}, g.k);
  e.x_u = du::strided_desc(xd, run, row_major(x_shape));
  e.dy_u = du::plain_desc(yd, run);
  e.dw_u = du::plain_desc(wd, DataType::Float);
  // The backward primitive takes a forward one as a hint for its layouts.
  dnnl::convolution_forward::desc fwd(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_direct, any(xd, run),
                                      any(wd, run), any(yd, run), strides, dil, pl, pr);
  dnnl::convolution_forward::primitive_desc fwd_pd(fwd, du::engine());
  dnnl::convolution_backward_weights::desc bwd(dnnl::algorithm::convolution_direct, any(xd, run),
                                               any(wd, wdt), any(yd, run), strides, dil, pl, pr);
  dnnl::convolution_backward_weights::primitive_desc pd(bwd, du::scratch_attr(), du::engine(),
                                                        fwd_pd);
  if (run != DataType::Float && du::is_reference_impl(pd)) return false;
  e.prim = du::make_prim<dnnl::convolution_backward_weights>(pd);
  e.x_p = pd.src_desc();
  e.dy_p = pd.diff_dst_desc();
  e.dw_p = pd.diff_weights_desc();
  if (e.x_p != e.x_u) e.x_r = du::make_reorder(e.x_u, e.x_p);
  if (e.dy_p != e.dy_u) e.dy_r = du::make_reorder(e.dy_u, e.dy_p);
  if (e.dw_p != e.dw_u) e.dw_r = du::make_reorder(e.dw_p, e.dw_u);
  return true;
}

WgEntry make_entry(const WgGeometry& g, const Shape& x_shape, DataType dt) {
  du::LowPrecisionGap gap = du::LowPrecisionGap::None;
  for (DataType run : {dt, DataType::Float}) {
    if (const auto why = du::low_precision_gap(run); why != du::LowPrecisionGap::None) {
      gap = why;
      continue;
    }
    // 16-bit inputs accumulate into float32 weights first (no rounding of dW), else 16-bit.
    std::vector<DataType> wdts{DataType::Float};
    if (run != DataType::Float) wdts.push_back(run);
    for (DataType wdt : wdts) {
      WgEntry e;
      try {
        if (!try_primitive(e, g, x_shape, run, wdt)) {
          gap = du::LowPrecisionGap::Reference;
          continue;
        }
      } catch (const dnnl::error&) {
        continue;
      }
      e.ok = true;
      e.run_dt = run;
      if (run != dt) e.why = du::float32_fallback_why("convolution weights gradient", dt, gap);
      return e;
    }
    if (run == DataType::Float) break;
  }
  WgEntry e;
  e.why =
      "oneDNN has no convolution weights gradient for this geometry; onyx's own loops run it, "
      "accumulating in float64";
  return e;
}

/// im2col of X into col [N*O, C*K] (T: the element's bits): col[(n, o), (c, k)] =
/// X[n, c, o*s + k*d - pl], zero outside X.
template <typename T>
void im2col(const WgGeometry& g, const Shape& x_shape, const T* x, T* col, int threads) {
  const size_t nsp = g.k.size();
  const int64_t O = shape_numel(g.out), K = shape_numel(g.k),
                I = shape_numel(Shape(x_shape.begin() + 2, x_shape.end()));
  // Offset into one X channel per (o, k), or -1 for padding.
  std::vector<int64_t> off(static_cast<size_t>(O * K));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t k = 0; k < K; ++k) {
      int64_t pos = 0, ro = o, rk = k;
      bool inside = true;
      Shape oi(nsp), ki(nsp);
      for (int64_t i = static_cast<int64_t>(nsp) - 1; i >= 0; --i) {
        oi[i] = ro % g.out[i], ro /= g.out[i];
        ki[i] = rk % g.k[i], rk /= g.k[i];
      }
      for (size_t i = 0; i < nsp; ++i) {
        int64_t p = oi[i] * g.stride[i] + ki[i] * g.dil[i] - g.pad_l[i];
        inside &= p >= 0 && p < x_shape[i + 2];
        pos = pos * x_shape[i + 2] + p;
      }
      off[o * K + k] = inside ? pos : -1;
    }
  parallel_for(g.N * O, threads, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t n = r / O, o = r % O;
      const int64_t* of = off.data() + o * K;
      T* dst = col + r * g.C * K;
      for (int64_t c = 0; c < g.C; ++c, dst += K) {
        const T* src = x + (n * g.C + c) * I;
        for (int64_t k = 0; k < K; ++k) dst[k] = of[k] >= 0 ? src[of[k]] : T(0);
      }
    }
  });
}

/// Runs an entry into `dw`, a float32 [M, C/G, k...] tensor.
void run_entry(KernelContext& ctx, const WgEntry& e, const WgGeometry& g, const Tensor& X,
               const Tensor& dY, Tensor& dw) {
  Tensor x = e.run_dt != X.dtype() ? du::to_float32(ctx, X) : X;
  Tensor dy = e.run_dt != dY.dtype() ? du::to_float32(ctx, dY) : dY;
  Tensor x_buf, dy_buf, dw_buf;
  auto in = [&](const dnnl::memory::desc& u, const dnnl::memory::desc& p,
                const std::optional<du::Prim>& r, const Tensor& t, Tensor& buf) {
    dnnl::memory m = du::wrap(u, t.raw());
    if (!r) return m;
    buf = du::scratch_for(ctx, p);
    dnnl::memory to = du::wrap(p, buf.raw());
    du::execute(ctx, *r, {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, to}});
    return to;
  };
  dnnl::memory dy_m = in(e.dy_u, e.dy_p, e.dy_r, dy, dy_buf);
  dnnl::memory user = du::wrap(e.dw_u, dw.raw()), dw_m = user;
  if (e.gemm) {
    x_buf = du::scratch_for(ctx, e.x_p);
    if (e.run_dt == DataType::Float)
      im2col(g, x.shape(), x.data<float>(), static_cast<float*>(x_buf.raw()), ctx.threads());
    else  // 16-bit floats move as their bits
      im2col(g, x.shape(), static_cast<const uint16_t*>(x.raw()),
             static_cast<uint16_t*>(x_buf.raw()), ctx.threads());
    du::execute(ctx, e.prim,
                {{DNNL_ARG_SRC, dy_m},
                 {DNNL_ARG_WEIGHTS, du::wrap(e.x_p, x_buf.raw())},
                 {DNNL_ARG_DST, user}});
    return;
  }
  dnnl::memory x_m = in(e.x_u, e.x_p, e.x_r, x, x_buf);
  if (e.dw_r) {
    dw_buf = du::scratch_for(ctx, e.dw_p);
    dw_m = du::wrap(e.dw_p, dw_buf.raw());
  }
  du::execute(ctx, e.prim,
              {{DNNL_ARG_SRC, x_m}, {DNNL_ARG_DIFF_DST, dy_m}, {DNNL_ARG_DIFF_WEIGHTS, dw_m}});
  if (e.dw_r) du::execute(ctx, *e.dw_r, {{DNNL_ARG_FROM, dw_m}, {DNNL_ARG_TO, user}});
}

/// Our loops, for double and geometries oneDNN refuses: one (m, c) pair per task, summing in
/// double over n, o for each kernel tap. X and dY are float or double.
template <typename T>
void ref_weight_grad(const WgGeometry& g, const Shape& x_full, const Tensor& X, const Tensor& dY,
                     std::vector<double>& dw, int threads) {
  const size_t nsp = g.k.size();
  const int64_t Cg = g.C / g.G, Mg = g.M / g.G, K = shape_numel(g.k), O = shape_numel(g.out),
                I = shape_numel(Shape(x_full.begin() + 2, x_full.end()));
  const T* x = X.data<T>();
  const T* dy = dY.data<T>();
  parallel_for(g.M * Cg, threads, 1, [&](int64_t b, int64_t e) {
    Shape kk(nsp), oo(nsp);
    for (int64_t mc = b; mc < e; ++mc) {
      const int64_t m = mc / Cg, c = (m / Mg) * Cg + mc % Cg;
      for (int64_t ki = 0; ki < K; ++ki) {
        for (int64_t r = ki, i = static_cast<int64_t>(nsp) - 1; i >= 0; --i)
          kk[i] = r % g.k[i], r /= g.k[i];
        double acc = 0;
        for (int64_t oi = 0; oi < O; ++oi) {
          int64_t pos = 0;
          bool inside = true;
          for (int64_t r = oi, i = static_cast<int64_t>(nsp) - 1; i >= 0; --i) {
            oo[i] = r % g.out[i], r /= g.out[i];
          }
          for (size_t i = 0; i < nsp && inside; ++i) {
            int64_t p = oo[i] * g.stride[i] + kk[i] * g.dil[i] - g.pad_l[i];
            inside = p >= 0 && p < x_full[i + 2];
            pos = pos * x_full[i + 2] + p;
          }
          if (!inside) continue;
          for (int64_t n = 0; n < g.N; ++n)
            acc += static_cast<double>(dy[(n * g.M + m) * O + oi]) *
                   static_cast<double>(x[(n * g.C + c) * I + pos]);
        }
        dw[mc * K + ki] = acc;
      }
    }
  });
}

class ConvWeightGradKernel final : public Kernel {
 public:
  explicit ConvWeightGradKernel(const KernelInfo& info)
      : k_(info.node.attr_ints("kernel_shape")),
        group_(info.node.attr_int("group", 1)),
        to_(info.node.has_attr("to") ? static_cast<DataType>(info.node.attr_int("to", 0))
                                     : DataType::Undefined) {
    const size_t nsp = k_.size();
    stride_ = info.node.attr_ints("strides", Shape(nsp, 1));
    dil_ = info.node.attr_ints("dilations", Shape(nsp, 1));
    pads_ = info.node.attr_ints("pads", Shape(2 * nsp, 0));
    bool ok = nsp >= 1 && stride_.size() == nsp && dil_.size() == nsp && pads_.size() == 2 * nsp &&
              group_ >= 1;
    for (size_t i = 0; ok && i < nsp; ++i)
      ok = k_[i] >= 1 && stride_[i] >= 1 && dil_[i] >= 1 && pads_[i] >= 0 && pads_[i + nsp] >= 0;
    ONYX_CHECK(ok,
               "[{}] expects kernel_shape >= 1, strides and dilations >= 1 and pads >= 0 for each "
               "spatial axis, group >= 1; got kernel_shape {}, strides {}, dilations {}, pads {}, "
               "group {}",
               info.label(), fmt::join(k_, ","), fmt::join(stride_, ","), fmt::join(dil_, ","),
               fmt::join(pads_, ","), group_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& dY = ctx.required_input(1);
    const DataType to = to_ == DataType::Undefined ? X.dtype() : to_;
    ONYX_CHECK(
        dY.dtype() == X.dtype() && (to == X.dtype() || to == DataType::Float),
        "[{}] X and dY must have one dtype and `to` be it or float32; got X {}, dY {}, to {}",
        ctx.label(), dtype_name(X.dtype()), dtype_name(dY.dtype()), dtype_name(to));
    WgGeometry g = geometry(ctx, X, dY);
    Shape out{g.M, g.C / g.G};
    out.insert(out.end(), g.k.begin(), g.k.end());
    Tensor& dW = ctx.allocate_output(0, to, out);
    if (dW.numel() == 0) return;
    Tensor dw = to == DataType::Float ? dW : ctx.scratch(DataType::Float, out);
    if (g.reads_nothing) {
      std::memset(dW.raw(), 0, dW.nbytes());
      return;
    }
    if (X.dtype() != DataType::Double) {
      du::ThreadScope threads(ctx.threads());
      du::PrimitiveCache<WgEntry>::Key key{static_cast<int64_t>(X.dtype()), ctx.threads()};
      key.insert(key.end(), X.shape().begin(), X.shape().end());
      key.insert(key.end(), dY.shape().begin(), dY.shape().end());
      auto e = cache_.get(key, [&] { return make_entry(g, X.shape(), X.dtype()); });
      if (X.dtype() != DataType::Float && e->run_dt != X.dtype())
        du::note_slow_path(ctx.node().op_type, X.dtype(), e->why);
      if (e->ok) {
        run_entry(ctx, *e, g, X, dY, dw);
        if (to != DataType::Float) du::from_float32(dw, dW, ctx.threads());
        return;
      }
    }
    std::vector<double> acc(static_cast<size_t>(dW.numel()));
    if (X.dtype() == DataType::Double) {
      ref_weight_grad<double>(g, X.shape(), X, dY, acc, ctx.threads());
    } else {
      Tensor x = du::to_float32(ctx, X), dy = du::to_float32(ctx, dY);
      ref_weight_grad<float>(g, X.shape(), x, dy, acc, ctx.threads());
    }
    if (to == DataType::Double) {
      std::memcpy(dW.raw(), acc.data(), acc.size() * sizeof(double));
      return;
    }
    float* f = dw.data<float>();
    for (size_t i = 0; i < acc.size(); ++i) f[i] = static_cast<float>(acc[i]);
    if (to != DataType::Float) du::from_float32(dw, dW, ctx.threads());
  }

 private:
  /// Checks X and dY against the attributes; the kernel taps are those the pattern's Conv
  /// produces (clipped by its Slice), and X is cut to the extent some window reaches.
  WgGeometry geometry(KernelContext& ctx, const Tensor& X, const Tensor& dY) const {
    const size_t nsp = k_.size();
    const auto rank = static_cast<int64_t>(nsp) + 2;
    ONYX_CHECK(X.rank() == rank && dY.rank() == rank && X.dim(0) == dY.dim(0) &&
                   X.dim(1) % group_ == 0 && dY.dim(1) % group_ == 0,
               "[{}] expects X [N, C, {} spatial dims] and dY [N, M, ...] with C and M multiples "
               "of group {}; got X {}, dY {}",
               ctx.label(), nsp, group_, shape_str(X.shape()), shape_str(dY.shape()));
    WgGeometry g{.N = X.dim(0), .C = X.dim(1), .M = dY.dim(1), .G = group_};
    g.stride = stride_;
    g.dil = dil_;
    g.reads_nothing = g.N == 0;
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t in = X.dim(i + 2), o = dY.dim(i + 2), pl = pads_[i], pr = pads_[i + nsp];
      // What is left of the padded input for the taps once dY's windows are placed.
      const int64_t span = in + pl + pr - (o - 1) * stride_[i] - 1;
      ONYX_CHECK(o >= 1 && span >= 0,
                 "[{}] dY {} has more outputs on spatial axis {} than X {} with pads ({}, {}) and "
                 "stride {} can give",
                 ctx.label(), shape_str(dY.shape()), i, shape_str(X.shape()), pl, pr, stride_[i]);
      const int64_t k = std::min(k_[i], span / dil_[i] + 1);
      // Right pad giving exactly o outputs; negative: X's last rows are never read.
      int64_t r = (o - 1) * stride_[i] + (k - 1) * dil_[i] + 1 - in - pl, reach = in;
      if (r < 0) reach = in + r, r = 0;
      g.reads_nothing |= reach <= 0;
      g.k.push_back(k);
      g.out.push_back(o);
      g.in.push_back(std::max<int64_t>(reach, 1));
      g.pad_l.push_back(pl);
      g.pad_r.push_back(r);
    }
    return g;
  }

  Shape k_, stride_, dil_, pads_;
  int64_t group_;
  DataType to_;
  du::PrimitiveCache<WgEntry> cache_;
};

}  // namespace

void register_conv_weight_grad_kernels(KernelRegistry& r) {
  r.add({.op_type = "ConvWeightGrad",
         .domain = "ai.onyx",
         .since = 1,
         .types = float_types(),
         .create = make_factory<ConvWeightGradKernel>()});
}

}  // namespace onyx::cpu
