// Gradient rules: nn ops (convolutions, pooling; normalizations are in rules_norm.cpp).
//
// Convolution gradients are convolutions again: dX of a Conv is a ConvTranspose of dY with the
// same W, dW a Conv of X (batch and channel axes swapped) with dY as the kernel, cropped to
// W's spatial shape; ConvTranspose swaps the two roles. Pads that auto_pad=SAME derives from
// an input of unknown size are computed at run time and applied with Pad / Slice.
#include <algorithm>
#include <climits>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

using Ints = std::vector<int64_t>;

Ints iota(int64_t from, int64_t to) {
  Ints r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

Ints concat(Ints a, const Ints& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Shape(v)[from:] as a 1-D int64 value.
Value* dims_from(GradContext& c, Value* v, int64_t from) {
  return c.op("Slice", {c.shape_of(v), c.ints({from}), c.ints({INT64_MAX})});
}

/// The spatial dims of v (from axis 2) when all are known.
std::optional<Ints> static_spatial(const GradContext& c, const Value* v) {
  const auto& s = c.sym_shape(v);
  if (!s || s->size() < 2) return std::nullopt;
  Ints r;
  for (size_t i = 2; i < s->size(); ++i) {
    if (!(*s)[i].is_fixed()) return std::nullopt;
    r.push_back((*s)[i].value);
  }
  return r;
}

/// t[:, :, starts:ends] over the nsp spatial axes.
Value* crop(GradContext& c, Value* t, Value* starts, Value* ends, int64_t nsp) {
  return c.op("Slice", {t, starts, ends, c.ints(iota(2, 2 + nsp))});
}

/// Reshape(v, lead ++ Shape(v)[from:]).
Value* reshape_lead(GradContext& c, Value* v, const Ints& lead, int64_t from) {
  return c.op("Reshape",
              {v, c.op("Concat", {c.ints(lead), dims_from(c, v, from)}, {Attribute::of_int("axis", 0)})});
}

/// Constant `v` of x's dtype broadcast to `shape` (an int64 1-D value).
Value* filled(GradContext& c, double v, Value* x, Value* shape) {
  return c.op("Expand", {c.scalar(v, x), shape});
}

/// The window of a Conv / pool: kernel, strides, dilations, and pads, which are static or,
/// for auto_pad SAME over an input of unknown size, 1-D int64 values computed at run time.
struct Window {
  int64_t nsp = 0;
  Ints k, s, d, pl, pr;
  Value *pl_v = nullptr, *pr_v = nullptr;
  bool dynamic() const { return pl_v != nullptr; }
  int64_t ek(size_t i) const { return (k[i] - 1) * d[i] + 1; }
  Ints ones() const { return Ints(nsp, 1); }
  Ints zeros() const { return Ints(nsp, 0); }
  Ints s_minus_1() const {
    Ints r;
    for (int64_t v : s) r.push_back(v - 1);
    return r;
  }
  /// Left pads as a value (static ones as a constant).
  Value* left(GradContext& c) const { return dynamic() ? pl_v : c.ints(pl); }
  Value* right(GradContext& c) const { return dynamic() ? pr_v : c.ints(pr); }
};

/// Strides, dilations and pads of c.node() for kernel `k`, following the ONNX rules (explicit
/// pads unless auto_pad is VALID; SAME puts the odd pad at the end (UPPER) or start (LOWER)).
Window window(GradContext& c, const Ints& k, Value* x) {
  const Node& n = c.node();
  Window w;
  w.nsp = static_cast<int64_t>(k.size());
  w.k = k;
  w.s = n.attr_ints("strides", w.ones());
  w.d = n.attr_ints("dilations", w.ones());
  Ints pads = n.attr_ints("pads", concat(w.zeros(), w.zeros()));
  ONYX_CHECK(static_cast<int64_t>(w.s.size()) == w.nsp &&
                 static_cast<int64_t>(w.d.size()) == w.nsp &&
                 static_cast<int64_t>(pads.size()) == 2 * w.nsp,
             "{}: strides {}, dilations {} or pads {} do not fit {} spatial dims", c.label(),
             fmt::join(w.s, ","), fmt::join(w.d, ","), fmt::join(pads, ","), w.nsp);
  std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (ap == "VALID") pads = concat(w.zeros(), w.zeros());
  w.pl.assign(pads.begin(), pads.begin() + w.nsp);
  w.pr.assign(pads.begin() + w.nsp, pads.end());
  if (ap != "SAME_UPPER" && ap != "SAME_LOWER") return w;
  bool upper = ap == "SAME_UPPER";
  if (auto in = static_spatial(c, x)) {
    for (int64_t i = 0; i < w.nsp; ++i) {
      int64_t o = ((*in)[i] + w.s[i] - 1) / w.s[i];
      int64_t total = std::max<int64_t>(0, (o - 1) * w.s[i] + w.ek(i) - (*in)[i]);
      w.pl[i] = upper ? total / 2 : total - total / 2;
      w.pr[i] = total - w.pl[i];
    }
    return w;
  }
  // total = max(0, (ceil(in / s) - 1) * s + ek - in), split as above, at run time.
  Ints ek;
  for (int64_t i = 0; i < w.nsp; ++i) ek.push_back(w.ek(i));
  Value* in = dims_from(c, x, 2);
  Value* o = c.op("Div", {c.op("Add", {in, c.ints(w.s_minus_1())}), c.ints(w.s)});
  Value* span =
      c.op("Add", {c.op("Mul", {c.op("Sub", {o, c.ints(w.ones())}), c.ints(w.s)}), c.ints(ek)});
  Value* total = c.op("Max", {c.op("Sub", {span, in}), c.ints(w.zeros())});
  Value* half = c.op("Div", {total, c.ints(Ints(w.nsp, 2))});
  w.pl_v = upper ? half : c.op("Sub", {total, half});
  w.pr_v = c.op("Sub", {total, w.pl_v});
  return w;
}

/// Spatial kernel shape: the kernel_shape attribute, else W's static shape.
Ints kernel_of(GradContext& c, Value* w) {
  if (c.node().has_attr("kernel_shape")) return c.node().attr_ints("kernel_shape");
  auto k = static_spatial(c, w);
  ONYX_CHECK(k,
             "{}: the kernel shape is unknown (no kernel_shape attribute and W '{}' has no "
             "static shape)",
             c.label(), w->name);
  return *k;
}

/// Dim i of v's static shape; onyx::Error when unknown.
int64_t static_dim(GradContext& c, Value* v, size_t i, const char* why) {
  const auto& s = c.sym_shape(v);
  ONYX_CHECK(s && s->size() > i && (*s)[i].is_fixed(), "{}: dim {} of '{}' must be known {}",
             c.label(), i, v->name, why);
  return (*s)[i].value;
}

/// The gradient of a convolution's kernel: dW[co, ci, k] = sum_{n,o} dout[n, co, o] *
/// in[n, g*ci, o*s + k*d - pl], as a Conv of `in` (batch and channel swapped, groups folded
/// into the channels) with `dout` as the kernel, strides and dilations swapped, cropped to
/// `w`'s kernel. Serves Conv (in = X, dout = dY) and ConvTranspose (in = dY, dout = X).
Value* weight_grad(GradContext& c, const Window& win, Value* in, Value* dout, Value* w,
                   int64_t group) {
  int64_t nsp = win.nsp;
  Ints swap = concat({1, 0}, iota(2, 2 + nsp));
  Value* a = in;
  if (win.dynamic()) {
    Value* pads =
        c.op("Concat", {c.ints({0, 0}), win.pl_v, c.ints({0, 0}), win.pr_v}, {Attribute::of_int("axis", 0)});
    a = c.op("Pad", {a, pads});
  }
  Value* b = dout;
  if (group == 1) {
    a = c.op("Transpose", {a}, {Attribute::of_ints("perm", swap)});
    b = c.op("Transpose", {b}, {Attribute::of_ints("perm", swap)});
  } else {
    int64_t co = static_dim(c, w, 0, "for grouped convolution gradients");
    int64_t ci = static_dim(c, w, 1, "for grouped convolution gradients");
    // a: [N, G*ci, ...] -> [ci, G*N, ...]; b: [N, co, ...] -> [co, N, ...] grouped by G.
    a = reshape_lead(c, a, {0, group, ci}, 2);
    a = c.op("Transpose", {a}, {Attribute::of_ints("perm", concat({2, 1, 0}, iota(3, 3 + nsp)))});
    a = reshape_lead(c, a, {ci, -1}, 3);
    b = reshape_lead(c, b, {0, group, co / group}, 2);
    b = c.op("Transpose", {b}, {Attribute::of_ints("perm", concat({1, 2, 0}, iota(3, 3 + nsp)))});
    b = reshape_lead(c, b, {co, -1}, 3);
  }
  Ints pads = win.dynamic() ? concat(win.zeros(), win.zeros()) : concat(win.pl, win.pr);
  Value* r = c.op("Conv", {a, b},
                  {Attribute::of_ints("strides", win.d), Attribute::of_ints("dilations", win.s),
                   Attribute::of_ints("pads", pads), Attribute::of_int("group", group)});
  r = crop(c, r, c.ints(win.zeros()), c.ints(win.k), nsp);
  return c.op("Transpose", {r}, {Attribute::of_ints("perm", swap)});
}

/// d bias = dY summed over every axis but 1.
Value* bias_grad(GradContext& c, Value* dy) {
  Value* flat = c.op("Reshape", {dy, c.ints({0, 0, -1})});
  return c.op("ReduceSum", {flat, c.ints({0, 2})}, {Attribute::of_int("keepdims", 0)});
}

// dX = ConvTranspose(dY, W), dW = Conv(X^T, dY^T) cropped to W, dB = sum(dY)
void conv_grad(GradContext& c) {
  Value *x = c.in(0), *w = c.in(1), *dy = c.dout(0);
  Window win = window(c, kernel_of(c, w), x);
  int64_t group = c.node().attr_int("group", 1);
  if (c.wants(0)) {
    Attrs a = {Attribute::of_ints("strides", win.s), Attribute::of_ints("dilations", win.d), Attribute::of_int("group", group)};
    auto in = static_spatial(c, x);
    if (in && !win.dynamic()) {
      // output_padding restores the trailing inputs that no window reaches past the last stride.
      Ints op;
      for (int64_t i = 0; i < win.nsp; ++i)
        op.push_back(((*in)[i] + win.pl[i] + win.pr[i] - win.ek(i)) % win.s[i]);
      a.push_back(Attribute::of_ints("pads", concat(win.pl, win.pr)));
      a.push_back(Attribute::of_ints("output_padding", op));
      c.set_din(0, c.op("ConvTranspose", {dy, w}, a));
    } else {
      // Unknown input size: transpose a little too far, then cut X's extent out of it.
      a.push_back(Attribute::of_ints("pads", concat(win.dynamic() ? win.zeros() : win.pl, win.zeros())));
      a.push_back(Attribute::of_ints("output_padding", win.s_minus_1()));
      Value* t = c.op("ConvTranspose", {dy, w}, a);
      Value* start = win.dynamic() ? win.pl_v : c.ints(win.zeros());
      c.set_din(0, crop(c, t, start, c.op("Add", {start, dims_from(c, x, 2)}), win.nsp));
    }
  }
  if (c.wants(1)) c.set_din(1, weight_grad(c, win, x, dy, w, group));
  if (c.wants(2)) c.set_din(2, bias_grad(c, dy));
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// dX = Conv(dY, W) with ConvTranspose's pads, dW = Conv(dY^T, X^T) cropped to W, dB = sum(dY)
void conv_transpose_grad(GradContext& c) {
  Value *x = c.in(0), *w = c.in(1), *dy = c.dout(0);
  const Node& n = c.node();
  Ints k = kernel_of(c, w);
  Window win;
  win.nsp = static_cast<int64_t>(k.size());
  win.k = k;
  win.s = n.attr_ints("strides", win.ones());
  win.d = n.attr_ints("dilations", win.ones());
  Ints opad = n.attr_ints("output_padding", win.zeros());
  Ints oshape = n.attr_ints("output_shape");
  Ints pads = n.attr_ints("pads");
  if (static_cast<int64_t>(oshape.size()) == win.nsp + 2)
    oshape.erase(oshape.begin(), oshape.begin() + 2);
  ONYX_CHECK(static_cast<int64_t>(win.s.size()) == win.nsp &&
                 static_cast<int64_t>(win.d.size()) == win.nsp &&
                 static_cast<int64_t>(opad.size()) == win.nsp &&
                 (pads.empty() || static_cast<int64_t>(pads.size()) == 2 * win.nsp) &&
                 (oshape.empty() || static_cast<int64_t>(oshape.size()) == win.nsp),
             "{}: strides, dilations, pads, output_padding or output_shape do not fit {} spatial "
             "dims",
             c.label(), win.nsp);
  std::string ap = n.attr_string("auto_pad", "NOTSET");
  auto in = static_spatial(c, x);
  ONYX_CHECK(oshape.empty() || in, "{}: output_shape needs the spatial shape of X '{}' to be known",
             c.label(), x->name);
  for (int64_t i = 0; i < win.nsp; ++i) {
    // The forward pads (left, and right net of output_padding), as the kernel derives them.
    int64_t full = in ? win.s[i] * ((*in)[i] - 1) + opad[i] + win.ek(i) : 0, pl = 0, pr = 0;
    if (!pads.empty() && ap != "VALID") {
      pl = pads[i];
      pr = oshape.empty() ? pads[i + win.nsp] : full - oshape[i] - pl;
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER" || !oshape.empty()) {
      int64_t total = oshape.empty() ? opad[i] + win.ek(i) - win.s[i] : full - oshape[i];
      pl = ap == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      pr = total - pl;
    }
    // The backward Conv must give back exactly X's extent: s*(in-1) <= out+pl+prc-ek < s*in.
    int64_t prc = std::max<int64_t>(0, pr - opad[i]);
    ONYX_CHECK(pl >= 0 && opad[i] - pr + prc < win.s[i],
               "{}: cannot differentiate pads ({}, {}) with output_padding {} on spatial axis {}",
               c.label(), pl, pr, opad[i], i);
    win.pl.push_back(pl);
    win.pr.push_back(prc);
  }
  int64_t group = n.attr_int("group", 1);
  if (c.wants(0))
    c.set_din(0, c.op("Conv", {dy, w},
                      {Attribute::of_ints("strides", win.s), Attribute::of_ints("dilations", win.d),
                       Attribute::of_ints("pads", concat(win.pl, win.pr)), Attribute::of_int("group", group)}));
  if (c.wants(1)) c.set_din(1, weight_grad(c, win, dy, x, w, group));
  if (c.wants(2)) c.set_din(2, bias_grad(c, dy));
}

// dX = scatter-add of dY into zeros at the argmax Indices (flattened over X)
void max_pool_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  ONYX_CHECK(c.opset() >= 16,
             "{}: the MaxPool gradient needs ScatterElements with reduction=add, "
             "so ai.onnx opset 16 or later, but the model imports opset {}",
             c.label(), c.opset());
  ONYX_CHECK(c.node().attr_int("storage_order", 0) == 0,
             "{}: the gradient needs row-major Indices "
             "(storage_order=0) but storage_order is {}",
             c.label(), c.node().attr_int("storage_order", 0));
  Value* idx = c.op("Reshape", {c.ensure_out(1), c.ints({-1})});
  Value* zeros = filled(c, 0.0, x, c.op("Unsqueeze", {c.op("Size", {x}), c.ints({0})}));
  Value* dx = c.op("ScatterElements", {zeros, idx, c.op("Reshape", {dy, c.ints({-1})})},
                   {Attribute::of_int("axis", 0), Attribute::of_string("reduction", "add")});
  c.set_din(0, c.op("Reshape", {dx, c.shape_of(x)}));
}

/// The adjoint of gathering windows: sum over every window of its g value, shaped like x, as a
/// ConvTranspose of g with a kernel of ones per (n, c) plane (s-1 extra outputs cover
/// ceil_mode's last partial window; the pads are cropped off).
Value* spread_windows(GradContext& c, const Window& win, Value* g, Value* x) {
  Value* kern = filled(c, 1.0, x, c.ints(concat({1, 1}, win.k)));
  Attrs ta = {Attribute::of_ints("strides", win.s), Attribute::of_ints("dilations", win.d),
              Attribute::of_ints("pads", concat(win.zeros(), win.zeros())),
              Attribute::of_ints("output_padding", win.s_minus_1())};
  Value* t = c.op("ConvTranspose", {reshape_lead(c, g, {-1, 1}, 2), kern}, ta);
  Value* start = win.left(c);
  t = crop(c, t, start, c.op("Add", {start, dims_from(c, x, 2)}), win.nsp);
  return c.op("Reshape", {t, c.shape_of(x)});
}

Window pool_window(GradContext& c) {
  ONYX_CHECK(c.node().has_attr("kernel_shape"), "{}: attribute kernel_shape is required",
             c.label());
  return window(c, c.node().attr_ints("kernel_shape"), c.in(0));
}

// dX = spread(dY / count); count = the taps each window averaged
void average_pool_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  Window win = pool_window(c);
  bool include_pad = c.node().attr_int("count_include_pad", 0) != 0;
  Value* sy = dims_from(c, dy, 2);
  Value* kern = filled(c, 1.0, x, c.ints(concat({1, 1}, win.k)));
  // Count: ones over X padded with ones (padding counts) or zeros (it does not), summed per
  // window; s-1 extra zeros at the end cover ceil_mode's last partial window.
  Value* plane = c.op("Concat", {c.ints({1, 1}), dims_from(c, x, 2)}, {Attribute::of_int("axis", 0)});
  Value* ones = filled(c, 1.0, x, plane);
  Value* pads = c.op("Concat", {c.ints({0, 0}), win.left(c), c.ints({0, 0}), win.right(c)},
                     {Attribute::of_int("axis", 0)});
  ones = c.op("Pad", {ones, pads, c.scalar(include_pad ? 1.0 : 0.0, x)});
  Attrs ca = {Attribute::of_ints("strides", win.s), Attribute::of_ints("dilations", win.d),
              Attribute::of_ints("pads", concat(win.zeros(), win.s_minus_1()))};
  Value* count = c.op("Conv", {ones, kern}, ca);
  count = crop(c, count, c.ints(win.zeros()), sy, win.nsp);
  c.set_din(0, spread_windows(c, win, c.op("Div", {dy, count}), x));
}

// y = (sum_window |x|^p)^(1/p): dX = sign(x) |x|^(p-1) * spread(dY * y^(1-p)), with y = 0
// (a window of zeros) giving 0
void lp_pool_grad(GradContext& c) {
  Value *x = c.in(0), *y = c.out(0);
  Window win = pool_window(c);
  double p = static_cast<double>(c.node().attr_int("p", 2));
  ONYX_CHECK(p >= 1, "{}: the gradient needs p >= 1 but p is {}", c.label(), p);
  Value* zero = c.scalar(0.0, x);
  Value* w = c.op("Pow", {y, c.scalar(1 - p, x)});
  w = c.op("Where", {c.op("Equal", {y, zero}), zero, w});
  Value* t = spread_windows(c, win, c.op("Mul", {c.dout(0), w}), x);
  Value* mag = c.op("Pow", {c.op("Abs", {x}), c.scalar(p - 1, x)});
  Value* local = c.op("Mul", {c.op("Sign", {x}), mag});
  c.set_din(0, c.op("Mul", {local, t}));
}

// dX = dY broadcast over the spatial axes / their size
void global_average_pool_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  Value* count = c.cast_like(c.op("Div", {c.op("Size", {x}), c.op("Size", {dy})}), x);
  c.set_din(0, c.op("Div", {c.op("Expand", {dy, c.shape_of(x)}), count}));
}

// dX = dY at the positions equal to their plane's maximum, split evenly among ties
void global_max_pool_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  Value* view = c.ints({0, 0, -1});
  Value* hit = c.cast_like(
      c.op("Equal", {c.op("Reshape", {x, view}), c.op("Reshape", {c.out(0), view})}), x);
  Value* ties = c.op("ReduceSum", {hit, c.ints({2})}, {Attribute::of_int("keepdims", 1)});
  Value* share = c.op("Div", {c.op("Reshape", {dy, view}), ties});
  c.set_din(0, c.op("Reshape", {c.op("Mul", {hit, share}), c.shape_of(x)}));
}

}  // namespace

void add_nn_rules(RuleTable& t) {
  t.add("Conv", conv_grad);
  t.add("ConvTranspose", conv_transpose_grad);
  t.add("MaxPool", max_pool_grad);
  t.add("AveragePool", average_pool_grad);
  t.add("LpPool", lp_pool_grad);
  t.add("GlobalAveragePool", global_average_pool_grad);
  t.add("GlobalMaxPool", global_max_pool_grad);
}

}  // namespace onyx::autodiff
