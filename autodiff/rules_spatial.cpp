// Gradient rules: spatial resampling (Resize, and Upsample through its opset-13 Resize form;
// GridSample).
//
// Resize is linear in X and separable: along each resized axis a, Y = X x_a M_a with M_a the
// [in_a, out_a] interpolation matrix. The rule gets M_a by running the same Resize over the
// identity eye(in_a) along its last axis, so the kernel's own coordinate transform, rounding,
// antialias and exclude_outside are reproduced exactly for every mode (nearest, linear, cubic),
// and dX = dY x_a M_a^T, one MatMul per resized axis. The cost is a dense [in_a, out_a]
// product per axis rather than a scatter of the few taps, which keeps the rule one code path.
//
// GridSample recomputes the kernel's taps (indices and weights of the 2^r corners) from the
// grid in plain ops, gathers X at them (GatherND) for the grid's gradient and scatter-adds dY
// into X's (ScatterND with reduction add), channels last so one index serves every channel.
#include <climits>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

using Ints = std::vector<int64_t>;

/// True when `v` is provably an empty tensor (an omitted-by-emptiness scales or sizes input).
bool known_empty(const GradContext& c, const Value* v) {
  const auto& s = c.sym_shape(v);
  return s && s->size() == 1 && (*s)[0].is_fixed() && (*s)[0].value == 0;
}

/// v[i:i+1] as a 1-D value.
Value* element(GradContext& c, Value* v, int64_t i) {
  return c.op("Slice", {v, c.ints({i}), c.ints({i + 1})});
}

/// dX = dY x_a M_a^T over every resized axis a.
void resize_grad(GradContext& c) {
  if (!c.wants(0)) return;
  const Node& n = c.node();
  Value *x = c.in(0), *roi = c.in(1), *scales = c.in(2), *sizes = c.in(3);
  int r = c.rank(x);
  ONYX_CHECK(r >= 0,
             "{}: the rank of input '{}' must be known to build the Resize gradient, but shape "
             "inference could not tell it",
             c.label(), x->name);
  // Which of scales and sizes drives the node (the other is omitted or empty).
  bool by_sizes = sizes && !(scales && !known_empty(c, scales));
  ONYX_CHECK(!(sizes && scales) || known_empty(c, scales) || known_empty(c, sizes),
             "{}: both scales and sizes are given and neither is known to be empty", c.label());
  ONYX_CHECK(by_sizes || scales, "{}: neither scales nor sizes is given", c.label());
  std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
  ONYX_CHECK(!by_sizes || policy == "stretch",
             "{}: the gradient supports keep_aspect_ratio_policy 'stretch' only, not '{}'",
             c.label(), policy);
  std::string ct = n.attr_string("coordinate_transformation_mode", "half_pixel");
  bool crop = ct == "tf_crop_and_resize";
  ONYX_CHECK(!crop || roi, "{}: tf_crop_and_resize needs roi", c.label());
  Ints axes = n.attr_ints("axes");
  for (int64_t& a : axes) a = c.norm_axis(a, r);
  if (axes.empty())
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  const int64_t na = static_cast<int64_t>(axes.size());

  // The identity Resize has the forward's attributes, over a 2-D input, with no extrapolation
  // value (an extrapolated output does not depend on X).
  Attrs attrs;
  for (const auto& [name, a] : n.attrs)
    if (name != "axes" && name != "keep_aspect_ratio_policy" && name != "extrapolation_value")
      attrs.push_back(a);
  std::optional<Tensor> cs = by_sizes ? std::nullopt : const_tensor(scales);
  if (cs && cs->numel() != na) cs.reset();  // malformed: left to the kernel's check
  const auto& xs = c.sym_shape(x);
  const auto& ys = c.sym_shape(c.out(0));
  Value* g = c.dout(0);
  for (int64_t i = 0; i < na; ++i) {
    int64_t a = axes[i];
    // Axes the kernel leaves alone: scale exactly 1 (or a size equal to the input's).
    bool same_dim = xs && ys && static_cast<int>(ys->size()) == r && (*xs)[a] == (*ys)[a] &&
                    ((*xs)[a].is_fixed() || !(*xs)[a].param.empty());
    if (!crop && ((cs && cs->to_double_vector().at(i) == 1.0) || (by_sizes && same_dim))) continue;
    Value* len = c.op("Slice", {c.shape_of(x), c.ints({a}), c.ints({a + 1})});
    Value* square = c.op("Concat", {len, len}, {Attribute::of_int("axis", 0)});
    Value* eye = c.op("EyeLike", {c.op("ConstantOfShape", {square})},
                      {Attribute::of_int("dtype", static_cast<int64_t>(c.dtype(x)))});
    Value* roi2 = nullptr;
    if (crop) {
      Value* lo = c.cast_like(c.ints({0}), roi);
      Value* hi = c.cast_like(c.ints({1}), roi);
      roi2 = c.op("Concat", {lo, element(c, roi, i), hi, element(c, roi, na + i)},
                  {Attribute::of_int("axis", 0)});
    }
    Value* m;  // [in_a, out_a]: m[k, j] = weight of input k in output j
    if (by_sizes) {
      Value* sz = c.op("Concat", {len, element(c, sizes, i)}, {Attribute::of_int("axis", 0)});
      m = c.op("Resize", {eye, roi2, nullptr, sz}, attrs);
    } else {
      Value* one = c.op("Unsqueeze", {c.scalar(1.0, scales), c.ints({0})});
      Value* sc = c.op("Concat", {one, element(c, scales, i)}, {Attribute::of_int("axis", 0)});
      m = c.op("Resize", {eye, roi2, sc}, attrs);
    }
    if (a == r - 1) {
      g = c.op("MatMul", {g, c.op("Transpose", {m})});
    } else if (a == r - 2) {
      g = c.op("MatMul", {m, g});
    } else {
      Ints perm;
      for (int64_t k = 0; k < r; ++k) perm.push_back(k == a ? r - 2 : k == r - 2 ? a : k);
      Value* t = c.op("Transpose", {g}, {Attribute::of_ints("perm", perm)});
      g = c.op("Transpose", {c.op("MatMul", {m, t})}, {Attribute::of_ints("perm", perm)});
    }
  }
  c.set_din(0, g);
}

/// A tap of one spatial axis of a GridSample: the X index (clamped into range, for a safe
/// gather), its weight (0 for a tap outside X under zeros padding) and d weight / d coordinate.
struct Tap {
  Value *idx, *w, *dw;
};

/// The taps of one axis and d coordinate / d grid value (0 where border padding clamps).
struct SampleAxis {
  std::vector<Tap> taps;
  Value* dcoord;
};

/// Axis `size` (0-D, X's dtype) sampled at normalised coordinates v, as the kernel does:
/// denormalise (align_corners or not), clamp (border), then floor/+1 (linear) or round.
SampleAxis sample_axis(GradContext& c, Value* v, Value* size, bool align, bool border,
                       bool nearest) {
  Value* x = c.in(0);
  Value *zero = c.scalar(0.0, x), *one = c.scalar(1.0, x), *half = c.scalar(0.5, x);
  Value* last = c.op("Sub", {size, one});
  Value* pos = c.op("Add", {v, one});
  Value* xf = align ? c.op("Mul", {c.op("Mul", {pos, half}), last})
                    : c.op("Mul", {c.op("Sub", {c.op("Mul", {pos, size}), one}), half});
  SampleAxis a;
  a.dcoord = c.op("Mul", {align ? last : size, half});
  if (border) {
    Value* inside =
        c.op("And", {c.op("GreaterOrEqual", {xf, zero}), c.op("LessOrEqual", {xf, last})});
    a.dcoord = c.op("Mul", {a.dcoord, c.cast_like(inside, x)});
    xf = c.op("Max", {c.op("Min", {xf, last}), zero});
  }
  auto tap = [&](Value* at, Value* w, double dw) {
    Value* valid = c.cast_like(
        c.op("And", {c.op("GreaterOrEqual", {at, zero}), c.op("LessOrEqual", {at, last})}), x);
    Value* idx = c.op("Cast", {c.op("Max", {c.op("Min", {at, last}), zero})},
                      {Attribute::of_int("to", static_cast<int64_t>(DataType::Int64))});
    Value* wv = w ? c.op("Mul", {w, valid}) : valid;
    a.taps.push_back({idx, wv, dw == 0 ? nullptr : c.op("Mul", {valid, c.scalar(dw, x)})});
  };
  if (nearest) {
    tap(c.op("Round", {xf}), nullptr, 0);
  } else {
    Value* x0 = c.op("Floor", {xf});
    Value* t = c.op("Sub", {xf, x0});
    tap(x0, c.op("Sub", {one, t}), -1);
    tap(c.op("Add", {x0, one}), t, 1);
  }
  return a;
}

Value* product(GradContext& c, const std::vector<Value*>& f) {
  Value* p = f.at(0);
  for (size_t i = 1; i < f.size(); ++i) p = c.op("Mul", {p, f[i]});
  return p;
}

// Y[n, ch, p] = sum over the 2^r corner taps k of W_k(grid) * X[n, ch, idx_k(grid)]:
// dX = scatter-add of dY * W_k at idx_k; d grid (axis i) = sum_ch dY * sum_k X[idx_k] *
// dW_k/dcoord_i * dcoord_i/dgrid (0 for nearest, whose taps are piecewise constant).
void grid_sample_grad(GradContext& c) {
  const Node& n = c.node();
  Value *x = c.in(0), *grid = c.in(1);
  int rank = c.rank(x);
  ONYX_CHECK(rank >= 3, "{}: the rank of X '{}' must be known (>= 3) to build the gradient",
             c.label(), x->name);
  const int64_t r = rank - 2;
  std::string mode = n.attr_string("mode", c.opset() < 20 ? "bilinear" : "linear");
  bool nearest = mode == "nearest";
  ONYX_CHECK(nearest || mode == "linear" || mode == "bilinear",
             "{}: the gradient supports modes nearest and (bi)linear, not '{}'", c.label(), mode);
  std::string padding = n.attr_string("padding_mode", "zeros");
  ONYX_CHECK(padding == "zeros" || padding == "border",
             "{}: the gradient supports padding_mode zeros and border, not '{}'", c.label(),
             padding);
  bool align = n.attr_int("align_corners", 0) != 0;

  // Channels last: X as [N, P_in, C], dY as [N, P_out, C], coordinates and taps [N, P_out, 1].
  const Attribute last = Attribute::of_ints("perm", {0, 2, 1});
  auto channels_last = [&](Value* v) {
    return c.op("Transpose", {c.op("Reshape", {v, c.ints({0, 0, -1})})}, {last});
  };
  Value* xt = channels_last(x);
  Value* dy = channels_last(c.dout(0));
  Value* sizes = c.op("Slice", {c.shape_of(x), c.ints({2}), c.ints({INT64_MAX})});
  Value* sizes_f = c.cast_like(sizes, x);
  std::vector<SampleAxis> axes;
  std::vector<Value*> strides;
  for (int64_t i = 0; i < r; ++i) {  // grid's last axis lists the innermost axis first
    Value* v = c.op("Gather", {grid, c.int_scalar(r - 1 - i)}, {Attribute::of_int("axis", -1)});
    v = c.op("Reshape", {v, c.ints({0, -1, 1})});
    Value* size = c.op("Gather", {sizes_f, c.int_scalar(i)});
    axes.push_back(sample_axis(c, v, size, align, padding == "border", nearest));
    Value* inner = c.op("Slice", {sizes, c.ints({i + 1}), c.ints({r})});
    strides.push_back(c.reduce("ReduceProd", inner, {}, false));
  }
  // Corner k takes tap (k / taps^(r-1-i)) % taps on axis i.
  const int64_t taps = nearest ? 1 : 2;
  int64_t corners = 1;
  for (int64_t i = 0; i < r; ++i) corners *= taps;
  auto tap_of = [&](int64_t k, int64_t i) {
    int64_t t = k;
    for (int64_t j = r - 1; j > i; --j) t /= taps;
    return axes[i].taps[t % taps];
  };
  std::vector<Value*> idx, w;  // per corner: flat X index [N, P_out, 1], weight
  for (int64_t k = 0; k < corners; ++k) {
    Value* off = nullptr;
    std::vector<Value*> ws;
    for (int64_t i = 0; i < r; ++i) {
      Value* o = c.op("Mul", {tap_of(k, i).idx, strides[i]});
      off = off ? c.op("Add", {off, o}) : o;
      ws.push_back(tap_of(k, i).w);
    }
    idx.push_back(off);
    w.push_back(product(c, ws));
  }
  auto axis_attr = [](int64_t a) { return Attribute::of_int("axis", a); };
  if (c.wants(0)) {
    // ScatterND of (n, index) pairs: dX[n, idx_k] += dY * W_k over every corner k.
    Value* n_ = c.op("Gather", {c.shape_of(x), c.int_scalar(0)});
    Value* batch = c.op("Range", {c.int_scalar(0), n_, c.int_scalar(1)});
    batch = c.op("Expand", {c.op("Reshape", {batch, c.ints({-1, 1, 1})}), c.shape_of(idx[0])});
    std::vector<Value*> where, upd;
    for (int64_t k = 0; k < corners; ++k) {
      where.push_back(c.op("Concat", {batch, idx[k]}, {axis_attr(-1)}));
      upd.push_back(c.op("Mul", {dy, w[k]}));
    }
    Value* all_where = corners == 1 ? where[0] : c.op("Concat", where, {axis_attr(1)});
    Value* all_upd = corners == 1 ? upd[0] : c.op("Concat", upd, {axis_attr(1)});
    Value* zeros = c.op("Expand", {c.scalar(0.0, x), c.shape_of(xt)});
    Value* dx = c.op("ScatterND", {zeros, all_where, all_upd},
                     {Attribute::of_string("reduction", "add")});
    dx = c.op("Transpose", {dx}, {last});
    c.set_din(0, c.op("Reshape", {dx, c.shape_of(x)}));
  }
  if (!c.wants(1)) return;
  if (nearest) {
    c.set_din(1, c.op("Expand", {c.scalar(0.0, grid), c.shape_of(grid)}));
    return;
  }
  std::vector<Value*> vals;  // X at each corner, [N, P_out, C]
  for (int64_t k = 0; k < corners; ++k)
    vals.push_back(c.op("GatherND", {xt, idx[k]}, {Attribute::of_int("batch_dims", 1)}));
  Value* lead = c.op("Slice", {c.shape_of(grid), c.ints({0}), c.ints({-1})});  // [N, O...]
  std::vector<Value*> parts(r);
  for (int64_t i = 0; i < r; ++i) {
    Value* s = nullptr;
    for (int64_t k = 0; k < corners; ++k) {
      std::vector<Value*> f = {vals[k], tap_of(k, i).dw};
      for (int64_t j = 0; j < r; ++j)
        if (j != i) f.push_back(tap_of(k, j).w);
      Value* term = product(c, f);
      s = s ? c.op("Add", {s, term}) : term;
    }
    Value* gi = c.reduce("ReduceSum", c.op("Mul", {dy, s}), {2}, true);  // [N, P_out, 1]
    gi = c.op("Reshape", {c.op("Mul", {gi, axes[i].dcoord}), lead});
    parts[r - 1 - i] = c.op("Unsqueeze", {gi, c.ints({-1})});
  }
  c.set_din(1, r == 1 ? parts[0] : c.op("Concat", parts, {axis_attr(-1)}));
}

}  // namespace

void add_spatial_rules(RuleTable& t) {
  t.add("Resize", resize_grad);
  t.add("GridSample", grid_sample_grad);
}

}  // namespace onyx::autodiff
