// Convolution on oneDNN: the primitive for one geometry, with Z as a binary-add or sum post-op
// and the fused activation as eltwise post-ops; reorders between our layouts (plain, or blocked for
// the NCHWc ops) and the primitive's, and weights packed once when they are constant.
#include "kernels/cpu/conv.h"
#include "kernels/cpu/winograd_weights.h"

namespace onyx::cpu {
namespace {

namespace du = dnnl_util;
using tag = dnnl::memory::format_tag;

/// Our buffer's descriptor for a [N, C, spatial...] tensor: plain, blocked by `block`, or
/// channels-last (kChannelsLast).
dnnl::memory::desc user_desc(const Shape& dims, DataType dt, int64_t block) {
  return block == 0 ? du::plain_desc(dims, dt) : du::blocked_desc(dims, dt, block);
}

/// oneDNN 2.6's first choice for plain float32 tensors on AVX-512 is brgconv on channels-last.
/// Its direct kernel on 16-channel blocks measured faster for batches > 1 and for 1x1 kernels
/// (1 thread, Xeon, with the reorders from and to our plain layout each run, as in training:
/// batch 16, 512 channels at 2x2: 3.1 vs 7.2 ms; 256 at 4x4: 1.9 vs 2.5; batch 8, 512 at 7x7:
/// 10.5 vs 12.3; batch 32: 40.0 vs 47.2; batch 1, 1x1 2048->512 at 7x7: 1.0 vs 1.6; never more
/// than 3 % slower), brgconv only for a batch of 1 with larger kernels (512 at 7x7: 2.2 vs 2.4).
/// True when `pd` is that first choice and the blocked one should be tried instead.
bool prefer_blocked_direct(const Geometry& g, const dnnl::primitive_desc_base& pd) {
  if (g.G != 1 || g.nsp() != 2) return false;
  if (std::string_view(pd.impl_info_str()).rfind("brgconv", 0) != 0) return false;
  return g.N > 1 || (g.k[0] == 1 && g.k[1] == 1);
}

/// oneDNN 2.6 offers two float32 Winograd kernels for a batch of 1 and takes F(2x2, 3x3) first;
/// F(4x4, 3x3) does 44 % fewer multiplications but its transformed weights are 2.25x larger.
/// Measured alone (1 and 2 threads, cache flushed between runs as weights come from memory in a
/// model), F(4x4) wins where the image holds at least as many 4x4 output tiles as there are
/// channels: 64 channels at 56x56 0.67 / 0.92 ms at 1 thread (0.51 / 0.77 at 2), 128 at 56x56
/// 2.34 / 3.24, 32 at 112x112 1.06 / 1.50; it loses below: 128 at 28x28 0.77 / 0.83 at 1 thread
/// but 0.56 / 0.56 at 2, 64 at 28x28 0.23 / 0.22 at 2, 256 at 14x14 1.49 / 1.10, 512 at 7x7
/// 3.43 / 1.97. Larger batches get F(4x4) from oneDNN already (the only one it offers there).
bool prefer_winograd_4x4(const Geometry& g) {
  if (g.N != 1 || g.nsp() != 2) return false;
  const int64_t tiles = ((g.out[0] + 3) / 4) * ((g.out[1] + 3) / 4);
  return tiles >= std::max(g.C, g.M);
}

/// Moves `pd` to oneDNN's F(4x4, 3x3) implementation when it offers one; else leaves it.
void take_winograd_4x4(dnnl::convolution_forward::primitive_desc& pd) {
  dnnl::convolution_forward::primitive_desc candidate = pd;
  do {
    if (std::string_view(candidate.impl_info_str()).find("wino_4x3") != std::string_view::npos) {
      pd = candidate;
      return;
    }
  } while (candidate.next_impl());
}

template <typename P, typename PD>
void finish_entry(ConvEntry& e, const PD& pd, bool has_sum) {
  e.prim = du::make_prim<P>(pd);
  e.impl = pd.impl_info_str();
  e.src_p = pd.src_desc();
  e.wei_p = pd.weights_desc();
  e.dst_p = pd.dst_desc();
  if (e.src_p != e.src_u) e.src_r = du::make_reorder(e.src_u, e.src_p);
  if (e.wei_p != e.wei_u) e.wei_r = du::make_reorder(e.wei_u, e.wei_p);
  e.wino_weights = e.wei_r && can_transform_winograd_weights(e.wei_u, e.wei_p);
  if (e.dst_p != e.dst_u) e.dst_r = du::make_reorder(e.dst_p, e.dst_u);
  // Z into the destination the sum post-op adds to: a reorder, or a copy when layouts agree.
  if (has_sum) e.sum_r = du::make_reorder(e.dst_u, e.dst_p);
  e.ok = true;
}

/// W in entry `e`'s layout (converted to float32 where the primitive runs in float32): in `buf`,
/// a tensor of its own when `persistent`, else scratch (or W itself when no reorder is needed).
void pack_weights(KernelContext& c, const ConvEntry& e, const Tensor& W, Tensor& buf,
                  bool persistent) {
  Tensor w = e.run_dt != W.dtype() ? du::to_float32(c, W) : W;
  if (!e.wei_r) {
    buf = persistent ? w.clone() : w;
    return;
  }
  buf = persistent ? Tensor::empty(DataType::UInt8, {static_cast<int64_t>(e.wei_p.get_size())})
                   : du::scratch_for(c, e.wei_p);
  if (e.wino_weights) {
    transform_winograd_weights(w.data<float>(), W.dim(0), W.dim(1), e.wei_p,
                               static_cast<float*>(buf.raw()), c.threads());
    return;
  }
  du::execute(
      c, *e.wei_r,
      {{DNNL_ARG_FROM, du::wrap(e.wei_u, w.raw())}, {DNNL_ARG_TO, du::wrap(e.wei_p, buf.raw())}});
}

}  // namespace

std::shared_ptr<ConvEntry::Packed> ConvWeightPacks::for_entry(const ConvEntry& e, bool ahead) {
  const dnnl::memory::desc& layout = e.wei_r ? e.wei_p : e.wei_u;
  std::lock_guard<std::mutex> lock(mu_);
  for (Slot& s : slots_)
    if (s.layout == layout && s.wino == e.wino_weights) {
      if (!ahead) s.ahead = false;
      return s.packed;
    }
  if (!ahead) std::erase_if(slots_, [](const Slot& s) { return s.ahead; });
  slots_.push_back({layout, e.wino_weights, std::make_shared<ConvEntry::Packed>(), ahead});
  return slots_.back().packed;
}

size_t pack_constant_conv_weights(KernelContext& ctx, const ConvEntry& e, const Tensor& W) {
  std::lock_guard<std::mutex> lock(e.packed->mu);
  if (e.packed->w.defined()) return 0;
  pack_weights(ctx, e, W, e.packed->w, true);
  return e.packed->w.nbytes();
}

ConvEntry make_conv_entry(const Geometry& g, const ConvSpec& spec) {
  ConvEntry e;
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
  if (spec.transpose)
    wstrides.insert(wstrides.end(), {k_sz, Mg * k_sz});
  else
    wstrides.insert(wstrides.end(), {Cg * k_sz, k_sz});
  wdims.insert(wdims.end(), g.k.begin(), g.k.end());
  Shape kstr(g.k.size(), 1);
  for (int i = static_cast<int>(g.k.size()) - 2; i >= 0; --i) kstr[i] = kstr[i + 1] * g.k[i + 1];
  wstrides.insert(wstrides.end(), kstr.begin(), kstr.end());

  // Z is added by a binary post-op reading it in place where the primitive runs on our blocked
  // layouts, else by a sum post-op over the destination prefilled with Z. (A plain Z would steer
  // oneDNN to its slow plain-layout convolution; a channels-last binary post-op steers oneDNN 2.6
  // from brgconv to its older jit kernels, up to 12 % slower than the copy the sum needs.)
  auto attr_for = [&](bool binary, DataType run) {
    dnnl::primitive_attr attr = du::scratch_attr();
    dnnl::post_ops po;
    if (binary)
      po.append_binary(dnnl::algorithm::binary_add, user_desc(dst, run, spec.layout.dst_block));
    else if (spec.has_sum)
      po.append_sum(1.0f);
    spec.act.append_to(po);
    attr.set_post_ops(po);
    return attr;
  };
  const bool blocked = spec.layout.src_block != 0 || spec.layout.dst_block != 0;
  const char* prim_name = spec.transpose ? "deconvolution" : "convolution";
  // Why a 16-bit dtype ends in float32: emulated, no faster or reference primitives only, or
  // none.
  du::LowPrecisionGap gap = du::LowPrecisionGap::None;
  auto fallback_why = [&] { return du::float32_fallback_why(prim_name, spec.dt, gap); };
  for (DataType run : {spec.dt, DataType::Float}) {
    if (const auto why = du::low_precision_gap(run); why != du::LowPrecisionGap::None) {
      gap = why;
      continue;
    }
    // Winograd (when asked, float32) on exactly our blocked layouts first. Blocked tensors
    // then try the direct primitive on exactly our layouts (no reorders at all), then on
    // whatever layout oneDNN prefers. Attempts 0-1: Winograd, 2-3: direct on our layouts,
    // 4-5: direct on oneDNN's; even ones read Z by a binary post-op, odd ones sum it.
    const bool try_winograd =
        spec.winograd && blocked && !spec.transpose && run == DataType::Float;
    for (int attempt = try_winograd ? 0 : 2; attempt < 6; ++attempt) {
      const bool winograd = attempt < 2;
      const bool forced = attempt < 4;
      const bool binary = attempt % 2 == 0;
      if ((forced && (!blocked || run != DataType::Float)) ||
          (binary && (!spec.has_sum || !forced || spec.layout.dst_block == du::kChannelsLast)))
        continue;
      try {
        auto d = du::to_dnnl(run);
        e.src_u = user_desc(src, run, spec.layout.src_block);
        e.dst_u = user_desc(dst, run, spec.layout.dst_block);
        e.wei_u = du::strided_desc(wdims, run, wstrides);
        e.bias_u = spec.has_bias ? du::plain_desc({g.M}, run) : dnnl::memory::desc();
        dnnl::memory::desc src_a = forced ? e.src_u
                                          : dnnl::memory::desc(du::to_dims(src), d, tag::any),
                           dst_a = forced ? e.dst_u
                                          : dnnl::memory::desc(du::to_dims(dst), d, tag::any),
                           wei_a(du::to_dims(wdims), d, tag::any);
        auto prop = dnnl::prop_kind::forward_inference;
        if (spec.transpose) {
          dnnl::deconvolution_forward::desc desc(prop, dnnl::algorithm::deconvolution_direct,
                                                 src_a, wei_a, e.bias_u, dst_a, strides, dil, pl,
                                                 pr);
          dnnl::deconvolution_forward::primitive_desc pd(desc, attr_for(false, run),
                                                         du::engine());
          if (run != DataType::Float && du::is_reference_impl(pd)) {
            gap = du::LowPrecisionGap::Reference;
            continue;
          }
          finish_entry<dnnl::deconvolution_forward>(e, pd, false);
        } else {
          dnnl::convolution_forward::desc desc(
              prop,
              winograd ? dnnl::algorithm::convolution_winograd
                       : dnnl::algorithm::convolution_direct,
              src_a, wei_a, e.bias_u, dst_a, strides, dil, pl, pr);
          dnnl::convolution_forward::primitive_desc pd(desc, attr_for(binary, run), du::engine());
          if (winograd && prefer_winograd_4x4(g)) take_winograd_4x4(pd);
          if (!forced && run == DataType::Float && prefer_blocked_direct(g, pd)) {
            try {
              dnnl::convolution_forward::desc blocked_desc(
                  prop, dnnl::algorithm::convolution_direct, du::blocked_desc(src, run, 16), wei_a,
                  e.bias_u, du::blocked_desc(dst, run, 16), strides, dil, pl, pr);
              dnnl::convolution_forward::primitive_desc bpd(blocked_desc, attr_for(false, run),
                                                            du::engine());
              if (!du::is_reference_impl(bpd)) pd = bpd;
            } catch (const dnnl::error&) {
              // no blocked direct kernel for this geometry: brgconv stays
            }
          }
          if ((run != DataType::Float || forced) && du::is_reference_impl(pd)) {
            if (run != DataType::Float) gap = du::LowPrecisionGap::Reference;
            continue;
          }
          finish_entry<dnnl::convolution_forward>(e, pd, spec.has_sum && !binary);
        }
        e.run_dt = run;
        e.z_binary = binary;
        if (run != spec.dt) e.why = fallback_why();
        return e;
      } catch (const dnnl::error&) {
        e = ConvEntry{};
      }
    }
    if (run == DataType::Float) break;
  }
  e.why = fmt::format(
      "oneDNN has no {} for this geometry; onyx's own loops run it, accumulating in float32",
      prim_name);
  return e;
}

void run_conv_entry(KernelContext& ctx, const ConvEntry& e, const Tensor& X, const Tensor& W,
                    const Tensor* B, const Tensor* Z, Tensor& Y, bool const_weights) {
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
  if (const_weights) {
    pack_constant_conv_weights(ctx, e, W);
    std::lock_guard<std::mutex> lock(e.packed->mu);
    wei_buf = e.packed->w;
  } else {
    pack_weights(ctx, e, W, wei_buf, false);
  }
  dnnl::memory wei = du::wrap(e.wei_r ? e.wei_p : e.wei_u, wei_buf.raw());
  dnnl::memory dst = du::wrap(e.dst_u, y.raw());
  if (e.dst_r) {
    dst_buf = du::scratch_for(ctx, e.dst_p);
    dst = du::wrap(e.dst_p, dst_buf.raw());
  }
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  Tensor z = Z && conv ? du::to_float32(ctx, *Z) : (Z ? *Z : Tensor());
  if (Z && e.z_binary) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, du::wrap(e.dst_u, z.raw()));
  } else if (Z) {
    du::execute(ctx, *e.sum_r, {{DNNL_ARG_FROM, du::wrap(e.dst_u, z.raw())}, {DNNL_ARG_TO, dst}});
  }
  if (B) args.emplace(DNNL_ARG_BIAS, du::wrap(e.bias_u, b.raw()));
  du::execute(ctx, e.prim, std::move(args));
  if (e.dst_r)
    du::execute(ctx, *e.dst_r, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, du::wrap(e.dst_u, y.raw())}});
  if (conv) du::from_float32(y, Y, ctx.threads());
}

}  // namespace onyx::cpu
