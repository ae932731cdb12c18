// Gradient rules: spatial resampling (Resize, and Upsample through its opset-13 Resize form).
//
// Resize is linear in X and separable: along each resized axis a, Y = X x_a M_a with M_a the
// [in_a, out_a] interpolation matrix. The rule gets M_a by running the same Resize over the
// identity eye(in_a) along its last axis, so the kernel's own coordinate transform, rounding,
// antialias and exclude_outside are reproduced exactly for every mode (nearest, linear, cubic),
// and dX = dY x_a M_a^T, one MatMul per resized axis. The cost is a dense [in_a, out_a]
// product per axis rather than a scatter of the few taps, which keeps the rule one code path.
#include <climits>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

using Ints = std::vector<int64_t>;

/// The values of `v` when they are constant (an initializer or a Constant node's tensor).
std::optional<Tensor> const_tensor(const Value* v) {
  if (!v) return std::nullopt;
  if (const Tensor* t = v->owner ? v->owner->initializer(v) : nullptr) return *t;
  const Node* p = v->producer;
  if (!p || p->op_type != "Constant" || !canonical_domain(p->domain).empty()) return std::nullopt;
  if (const Attribute* a = p->attr("value"); a && a->type == Attribute::Type::Tensor) return a->t;
  return std::nullopt;
}

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

}  // namespace

void add_spatial_rules(RuleTable& t) { t.add("Resize", resize_grad); }

}  // namespace onyx::autodiff
