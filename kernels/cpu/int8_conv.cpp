#include "kernels/cpu/int8_conv.h"

#include <bit>


namespace onyx::cpu {

namespace du = dnnl_util;

namespace {

bool scalar(const Tensor* t) { return t && t->numel() == 1; }

dnnl::memory::dims dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

}  // namespace

Int8Conv::Int8Conv(const Node& node, const Tensor* constant_w) : attrs_(node) {
  if (constant_w) w_const_ = *constant_w;
}

bool Int8Conv::run(KernelContext& ctx) const {
  const Tensor& X = ctx.required_input(0);
  const Tensor& xs = ctx.required_input(1);
  const Tensor* xz = ctx.input(2);
  const Tensor& W = ctx.required_input(3);
  const Tensor& ws = ctx.required_input(4);
  const Tensor* wz = ctx.input(5);
  const Tensor& ys = ctx.required_input(6);
  const Tensor* yz = ctx.input(7);
  const Tensor* B = ctx.input(8);
  const DataType xdt = X.dtype();
  if ((xdt != DataType::UInt8 && xdt != DataType::Int8) || W.dtype() != DataType::Int8 ||
      X.rank() != 4 || W.rank() != 4 || !exact_int8_dot_products())
    return false;
  if (xs.dtype() != DataType::Float || ws.dtype() != DataType::Float || ys.dtype() != DataType::Float ||
      !scalar(&xs) || !scalar(&ys) || (xz && (!scalar(xz) || xz->dtype() != xdt)) ||
      (yz && (!scalar(yz) || yz->dtype() != xdt)) || (wz && !all_zero(*wz)))
    return false;
  const int64_t M = W.dim(0);
  if (ws.numel() != 1 && ws.numel() != M) return false;
  if (B && (B->dtype() != DataType::Int32 || B->numel() != M || B->rank() != 1)) return false;
  // The geometry (and its errors for a W that does not fit X) as the float Conv checks it.
  const ConvGeometry geo = conv_geometry(ctx, attrs_, X.shape(), W);
  if (!geo.pads_nonnegative() || geo.N == 0 || M == 0) return false;
  const int64_t G = geo.G;
  const bool pack = w_const_ && w_const_->raw() == W.raw();
  du::ThreadScope threads(ctx.threads());
  // Requantization scales in float, as x_scale * w_scale / y_scale. oneDNN 2.6 convolutions
  // take them at creation only: their bits are part of the primitive's key.
  const float xsv = *xs.data<float>(), ysv = *ys.data<float>();
  std::vector<float> scales(static_cast<size_t>(ws.numel()));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = xsv * ws.data<float>()[i] / ysv;
  du::PrimitiveCache<Entry>::Key key{static_cast<int64_t>(xdt), ctx.threads(), geo.N, geo.C,
                                     geo.in[0], geo.in[1], M, geo.k[0], geo.k[1], G,
                                     B != nullptr, pack};
  for (int64_t v : {geo.stride[0], geo.stride[1], geo.dil[0], geo.dil[1], geo.pad_l[0],
                    geo.pad_l[1], geo.pad_r[0], geo.pad_r[1]})
    key.push_back(v);
  for (float v : scales) key.push_back(std::bit_cast<int32_t>(v));
  auto e = cache_.get(key, [&] {
    Entry en;
    try {
      using tag = dnnl::memory::format_tag;
      using dt = dnnl::memory::data_type;
      const dt x_dt = du::to_dnnl(xdt);
      const dnnl::memory::dims xd = dims({geo.N, geo.C, geo.in[0], geo.in[1]});
      const dnnl::memory::dims yd = dims({geo.N, M, geo.out[0], geo.out[1]});
      const dnnl::memory::dims wd = G == 1 ? dims({M, geo.C, geo.k[0], geo.k[1]})
                                           : dims({G, M / G, geo.C / G, geo.k[0], geo.k[1]});
      en.x = dnnl::memory::desc(xd, x_dt, tag::nchw);
      en.y = dnnl::memory::desc(yd, x_dt, tag::nchw);
      en.w = dnnl::memory::desc(wd, dt::s8, G == 1 ? tag::oihw : tag::goihw);
      en.b = dnnl::memory::desc({M}, dt::s32, tag::x);
      en.scales = dnnl::memory::desc({ws.numel()}, dt::f32, tag::x);
      en.zp = dnnl::memory::desc({1}, dt::s32, tag::x);
      dnnl::primitive_attr attr = du::scratch_attr();
      attr.set_output_scales(ws.numel() == 1 ? 0 : 1 << 1, scales);
      attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
      const dnnl::memory::desc x_any(xd, x_dt, tag::any), y_any(yd, x_dt, tag::any);
      const dnnl::memory::desc w_any = pack ? dnnl::memory::desc(wd, dt::s8, tag::any) : en.w;
      const dnnl::memory::dims st = dims(geo.stride), pl = dims(geo.pad_l), pr = dims(geo.pad_r);
      dnnl::memory::dims dl = dims(geo.dil);
      for (auto& d : dl) d -= 1;  // oneDNN counts the gaps
      auto desc = B ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::convolution_direct, x_any,
                                                      w_any, en.b, y_any, st, dl, pl, pr)
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                      dnnl::algorithm::convolution_direct, x_any,
                                                      w_any, y_any, st, dl, pl, pr);
      dnnl::convolution_forward::primitive_desc pd(desc, attr, du::engine());
      if (du::is_reference_impl(pd)) return en;
      en.prim = du::make_prim<dnnl::convolution_forward>(pd);
      en.x_p = pd.src_desc();
      en.y_p = pd.dst_desc();
      en.w_p = pd.weights_desc();
      if (en.x_p != en.x) en.x_r = du::make_reorder(en.x, en.x_p);
      if (en.y_p != en.y) en.y_r = du::make_reorder(en.y_p, en.y);
      if (en.w_p != en.w) {
        if (!pack) return en;  // a W fed at run time would be reordered every call
        en.w_r = du::make_reorder(en.w, en.w_p);
      }
      en.ok = true;
    } catch (const dnnl::error&) {
    }
    return en;
  });
  if (!e->ok) return false;
  int32_t x_zp = xz ? int8_scalar(*xz) : 0, y_zp = yz ? int8_scalar(*yz) : 0;
  Tensor& Y = ctx.allocate_output(0, xdt, {geo.N, M, geo.out[0], geo.out[1]});
  Tensor x = X, y = Y;
  if (e->x_r) {
    x = du::scratch_for(ctx, e->x_p);
    du::execute(ctx, *e->x_r, {{DNNL_ARG_FROM, du::wrap(e->x, X.raw())}, {DNNL_ARG_TO, du::wrap(e->x_p, x.raw())}});
  }
  if (e->y_r) y = du::scratch_for(ctx, e->y_p);
  const Tensor w = packed_.get(ctx, W, e->w, e->w_p, e->w_r ? &*e->w_r : nullptr);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, du::wrap(e->x_p, x.raw())},
      {DNNL_ARG_WEIGHTS, du::wrap(e->w_p, w.raw())},
      {DNNL_ARG_DST, du::wrap(e->y_p, y.raw())},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, du::wrap(e->zp, &x_zp)},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, du::wrap(e->zp, &y_zp)}};
  if (B) args.emplace(DNNL_ARG_BIAS, du::wrap(e->b, B->raw()));
  du::execute(ctx, e->prim, args);
  if (e->y_r)
    du::execute(ctx, *e->y_r, {{DNNL_ARG_FROM, du::wrap(e->y_p, y.raw())}, {DNNL_ARG_TO, du::wrap(e->y, Y.raw())}});
  return true;
}

}  // namespace onyx::cpu
