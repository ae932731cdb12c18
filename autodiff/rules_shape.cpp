// Gradient rules: shape ops. Pure re-layouts (Transpose, DepthToSpace, ...) send dy back through
// the inverse layout; selections (Slice, Gather*, Pad, TopK) scatter dy into zeros shaped like x;
// scatters gather dy back for their updates.
#include <algorithm>
#include <optional>

#include "autodiff/gradient_rules.h"
#include "graph/shape_inference.h"
#include "graph/error.h"

namespace onyx::autodiff {

namespace {

/// The int64 values of `v` when they are constant (an initializer or a Constant node),
/// nullopt when they are computed at run time or omitted.
std::optional<std::vector<int64_t>> const_ints(const Value* v) {
  if (std::optional<Tensor> t = const_tensor(v)) return t->to_int64_vector();
  return std::nullopt;
}

/// const_ints, or the values data propagation finds for a computation over constants (the
/// dynamo exporter's Reshape / Concat of Constants).
std::optional<std::vector<int64_t>> known_ints(const Value* v) {
  if (auto c = const_ints(v)) return c;
  return v && v->owner ? known_int_values(*v->owner, v) : std::nullopt;
}

/// x's shape when every dim is fixed.
std::optional<std::vector<int64_t>> fixed_shape(const GradContext& c, const Value* x) {
  const auto& s = c.sym_shape(x);
  if (!s) return std::nullopt;
  std::vector<int64_t> dims;
  for (const Dim& d : *s) {
    if (!d.is_fixed()) return std::nullopt;
    dims.push_back(d.value);
  }
  return dims;
}

/// Shape(x) as a value: a constant when static.
Value* shape_value(GradContext& c, Value* x) {
  if (auto s = fixed_shape(c, x)) return c.ints(*s);
  return c.shape_of(x);
}

/// g reshaped to x's shape (allowzero: a 0 in x's shape is a real 0-sized dim).
Value* reshape_like(GradContext& c, Value* g, Value* x) {
  return c.op("Reshape", {g, shape_value(c, x)}, {Attribute::of_int("allowzero", 1)});
}

/// Zeros with x's dtype and shape.
Value* zeros_like(GradContext& c, Value* x) {
  return c.op("Expand", {c.scalar(0.0, x), shape_value(c, x)});
}

/// Known rank of x; onyx::Error when shape inference could not tell.
int known_rank(const GradContext& c, const Value* x) {
  int r = c.rank(x);
  ONYX_CHECK(r >= 0,
             "{}: the rank of input '{}' must be known to build its gradient, but shape "
             "inference could not tell it",
             c.label(), x->name);
  return r;
}

/// onyx::Error unless the model's opset allows the ScatterND/ScatterElements `reduction`
/// attribute, which accumulating gradients need.
void require_scatter_add(const GradContext& c) {
  ONYX_CHECK(c.opset() >= 16,
             "{}: its gradient accumulates with ScatterND/ScatterElements "
             "reduction='add', which needs ai.onnx opset 16 or later, but the model imports opset "
             "{}; re-export the model with opset >= 16",
             c.label(), c.opset());
}

/// A flat int64 map of x's elements: Reshape(Range(0, Size(x)), Shape(x)). Running a selection
/// op on it tells, for each output element, which input element it read.
Value* element_ids(GradContext& c, Value* x) {
  Value* n = c.op("Size", {x});
  Value* ids = c.op("Range", {c.int_scalar(0), n, c.int_scalar(1)});
  return c.op("Reshape", {ids, shape_value(c, x)});
}

/// dx from dy and `ids` (the element_ids of x after the forward selection, shaped like dy):
/// dx.flat[ids[k]] (+)= dy.flat[k].
Value* scatter_flat(GradContext& c, Value* dy, Value* ids, bool accumulate) {
  Value* x = c.in(0);
  Value* n = c.op("Unsqueeze", {c.op("Size", {x}), c.ints({0})});
  Value* zeros = c.op("Expand", {c.scalar(0.0, x), n});
  Value* tuples = c.op("Reshape", {ids, c.ints({-1, 1})});
  Value* flat_dy = c.op("Reshape", {dy, c.ints({-1})});
  Attrs attrs;
  if (accumulate) attrs.push_back(Attribute::of_string("reduction", "add"));
  return reshape_like(c, c.op("ScatterND", {zeros, tuples, flat_dy}, attrs), x);
}

// d reshape-like(x) = Reshape(dy, Shape(x))   (Reshape, Flatten, Squeeze, Unsqueeze)
void reshape_grad(GradContext& c) {
  if (c.wants(0)) c.set_din(0, reshape_like(c, c.dout(0), c.in(0)));
}

// d Transpose(x, perm) = Transpose(dy, perm^-1)
void transpose_grad(GradContext& c) {
  if (!c.node().has_attr("perm")) return c.set_din(0, c.op("Transpose", {c.dout(0)}));
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  std::vector<int64_t> inv(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t p = c.norm_axis(perm[i], static_cast<int64_t>(perm.size()));
    ONYX_CHECK(inv[p] < 0, "{}: perm {} repeats axis {}", c.label(), fmt::join(perm, ","), p);
    inv[p] = static_cast<int64_t>(i);
  }
  c.set_din(0, c.op("Transpose", {c.dout(0)}, {Attribute::of_ints("perm", inv)}));
}

// d Concat(x_0..x_n, axis) = Split(dy, [len_0..len_n], axis)
void concat_grad(GradContext& c) {
  int64_t axis = c.node().attr_int("axis", 0);
  int n = c.node().num_inputs();
  // Sizes along the axis: constants when static, else gathered from each input's shape.
  std::vector<int64_t> fixed;
  for (int i = 0; i < n; ++i) {
    const auto& s = c.sym_shape(c.in(i));
    if (!s || s->empty()) break;
    const Dim& d = (*s)[c.norm_axis(axis, static_cast<int64_t>(s->size()))];
    if (!d.is_fixed()) break;
    fixed.push_back(d.value);
  }
  Value* split;
  if (static_cast<int>(fixed.size()) == n) {
    split = c.ints(fixed);
  } else {
    std::vector<Value*> lens;
    for (int i = 0; i < n; ++i)
      lens.push_back(c.op("Gather", {c.shape_of(c.in(i)), c.ints({axis})}));
    split = c.op("Concat", lens, {Attribute::of_int("axis", 0)});
  }
  std::vector<Value*> parts = c.op_n("Split", {c.dout(0), split}, n, {Attribute::of_int("axis", axis)});
  for (int i = 0; i < n; ++i)
    if (c.wants(i)) c.set_din(i, parts[i]);
}

// d Split(x)_k = dy_k, concatenated back (zeros for outputs nothing downstream uses)
void split_grad(GradContext& c) {
  std::vector<Value*> parts;
  for (int k = 0; k < static_cast<int>(c.node().outputs.size()); ++k)
    parts.push_back(c.dout(k) ? c.dout(k) : zeros_like(c, c.ensure_out(k)));
  c.set_din(0, c.op("Concat", parts, {Attribute::of_int("axis", c.node().attr_int("axis", 0))}));
}

/// Slice with constant unit steps on static dims: the pads that put dy back in place.
std::optional<std::vector<int64_t>> slice_as_pads(GradContext& c) {
  auto shape = fixed_shape(c, c.in(0));
  auto starts = known_ints(c.in(1)), ends = known_ints(c.in(2));
  if (!shape || !starts || !ends) return std::nullopt;
  auto r = static_cast<int64_t>(shape->size());
  std::vector<int64_t> axes, steps(starts->size(), 1);
  if (c.node().has_input(3)) {
    auto a = known_ints(c.in(3));
    if (!a) return std::nullopt;
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (c.node().has_input(4)) {
    auto s = known_ints(c.in(4));
    if (!s) return std::nullopt;
    steps = *s;
  }
  std::vector<int64_t> pads(2 * r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (steps.at(i) != 1) return std::nullopt;
    int64_t a = c.norm_axis(axes[i], r), d = (*shape)[a];
    auto clamp = [d](int64_t v) { return std::clamp(v < 0 ? v + d : v, int64_t{0}, d); };
    int64_t b = clamp(starts->at(i)), e = std::max(b, clamp(ends->at(i)));
    pads[a] = b;
    pads[a + r] = d - e;
  }
  return pads;
}

// d Slice(x) = dy placed back at the sliced positions, zeros elsewhere
void slice_grad(GradContext& c) {
  if (auto pads = slice_as_pads(c)) return c.set_din(0, c.op("Pad", {c.dout(0), c.ints(*pads)}));
  // General case (negative or strided steps, run-time bounds): slice x's element ids the same way.
  std::vector<Value*> ins = c.node().inputs;
  ins[0] = element_ids(c, c.in(0));
  Value* ids = c.op("Slice", ins);
  c.set_din(0, scatter_flat(c, c.dout(0), ids, false));
}

// d Gather(x, idx, axis) = zeros(x) with dy's slices added at idx (repeats accumulate)
void gather_grad(GradContext& c) {
  require_scatter_add(c);
  Value *x = c.in(0), *idx = c.in(1), *dy = c.dout(0);
  const int64_t r = known_rank(c, x);
  const int64_t axis = c.norm_axis(c.node().attr_int("axis", 0), r);
  Value* tuples = c.op(
      "Unsqueeze", {c.op("Cast", {idx}, {Attribute::of_int("to", int64_t(DataType::Int64))}), c.ints({-1})});
  // Each index addresses a whole slice along axis 0: ScatterND with index tuples of length 1.
  if (axis == 0)
    return c.set_din(
        0, c.op("ScatterND", {zeros_like(c, x), tuples, dy}, {Attribute::of_string("reduction", "add")}));
  // Other axes: move the gathered axis (and dy's index dims) to the front and back again.
  const int64_t q = known_rank(c, idx);
  std::vector<int64_t> perm_dy, perm_x = {axis}, inv_x;
  for (int64_t k = 0; k < q; ++k) perm_dy.push_back(axis + k);
  for (int64_t k = 0; k < axis; ++k) perm_dy.push_back(k);
  for (int64_t k = axis + q; k < r - 1 + q; ++k) perm_dy.push_back(k);
  for (int64_t k = 0; k < r; ++k)
    if (k != axis) perm_x.push_back(k);
  for (int64_t k = 0; k < r; ++k) inv_x.push_back(k < axis ? k + 1 : k == axis ? 0 : k);
  Value* dy_t = c.op("Transpose", {dy}, {Attribute::of_ints("perm", perm_dy)});
  Value* zeros_t =
      c.op("Expand", {c.scalar(0.0, x), c.op("Gather", {c.shape_of(x), c.ints(perm_x)})});
  Value* dx_t = c.op("ScatterND", {zeros_t, tuples, dy_t}, {Attribute::of_string("reduction", "add")});
  c.set_din(0, c.op("Transpose", {dx_t}, {Attribute::of_ints("perm", inv_x)}));
}

// d GatherElements(x, idx, axis) = ScatterElements(zeros(x), idx, dy, axis, reduction=add)
void gather_elements_grad(GradContext& c) {
  require_scatter_add(c);
  c.set_din(0, c.op("ScatterElements", {zeros_like(c, c.in(0)), c.in(1), c.dout(0)},
                    {Attribute::of_int("axis", c.node().attr_int("axis", 0)), Attribute::of_string("reduction", "add")}));
}

// d Expand(x, shape) = dy summed down to x's shape
void expand_grad(GradContext& c) { c.set_din(0, c.sum_to(c.dout(0), c.in(0))); }

// d Tile(x, reps) = ReduceSum(Reshape(dy, [r0, d0, r1, d1, ...]), axes 0, 2, 4, ...)
void tile_grad(GradContext& c) {
  Value *x = c.in(0), *reps = c.in(1);
  auto shape = fixed_shape(c, x);
  auto rv = known_ints(reps);
  int64_t r = c.rank(x) >= 0 ? c.rank(x) : rv ? static_cast<int64_t>(rv->size()) : -1;
  if (r == 0) return c.set_din(0, c.dout(0));
  Value* pairs;
  if (shape && rv) {
    ONYX_CHECK(static_cast<int64_t>(rv->size()) == r,
               "{}: repeats has {} values but the input "
               "has rank {}",
               c.label(), rv->size(), r);
    std::vector<int64_t> v;
    for (int64_t i = 0; i < r; ++i) v.insert(v.end(), {(*rv)[i], (*shape)[i]});
    pairs = c.ints(v);
  } else {
    Value* rep_col = c.op("Unsqueeze", {reps, c.ints({1})});
    Value* dim_col = c.op("Unsqueeze", {c.shape_of(x), c.ints({1})});
    pairs =
        c.op("Reshape", {c.op("Concat", {rep_col, dim_col}, {Attribute::of_int("axis", 1)}), c.ints({-1})});
  }
  // The repeat axes 0, 2, 4, ...: constants when the rank is known, else a Range.
  Value* axes;
  if (r > 0) {
    std::vector<int64_t> v;
    for (int64_t i = 0; i < r; ++i) v.push_back(2 * i);
    axes = c.ints(v);
  } else {
    axes = c.op("Range", {c.int_scalar(0), c.op("Size", {pairs}), c.int_scalar(2)});
  }
  Value* split = c.op("Reshape", {c.dout(0), pairs}, {Attribute::of_int("allowzero", 1)});
  c.set_din(0, c.op("ReduceSum", {split, axes}, {Attribute::of_int("keepdims", 0)}));
}

// d Pad(x): constant mode: Pad(dy, -pads) (crops the padding, zero-fills what was cropped);
// reflect/edge/wrap: every output element adds into the input element it copied.
void pad_grad(GradContext& c) {
  std::string mode = c.node().attr_string("mode", "constant");
  Value* axes = c.node().has_input(3) ? c.in(3) : nullptr;
  if (mode == "constant") {
    Value* neg;
    if (auto p = known_ints(c.in(1))) {
      std::vector<int64_t> v = *p;
      for (int64_t& e : v) e = -e;
      neg = c.ints(v);
    } else {
      neg = c.op("Neg", {c.in(1)});
    }
    std::vector<Value*> ins = {c.dout(0), neg};
    if (axes) ins.insert(ins.end(), {nullptr, axes});
    return c.set_din(0, c.op("Pad", ins));
  }
  ONYX_CHECK(mode == "reflect" || mode == "edge" || mode == "wrap",
             "{}: no gradient for Pad mode "
             "'{}'; supported modes are constant, reflect, edge and wrap",
             c.label(), mode);
  require_scatter_add(c);
  std::vector<Value*> ins = {element_ids(c, c.in(0)), c.in(1)};
  if (axes) ins.insert(ins.end(), {nullptr, axes});
  Value* ids = c.op("Pad", ins, {Attribute::of_string("mode", mode)});
  c.set_din(0, scatter_flat(c, c.dout(0), ids, true));
}

/// The required blocksize attribute of DepthToSpace / SpaceToDepth.
int64_t blocksize(const GradContext& c) {
  int64_t b = c.node().attr_int("blocksize", 0);
  ONYX_CHECK(b >= 1, "{}: attribute blocksize must be >= 1, found {}", c.label(), b);
  return b;
}

// d DepthToSpace: the inverse re-layout. DCR: SpaceToDepth(dy); CRD: dy [N, C', H*b, W*b] viewed
// as [N, C', H, b, W, b], transposed to [N, C', b, b, H, W], reshaped to x.
void depth_to_space_grad(GradContext& c) {
  Value *x = c.in(0), *dy = c.dout(0);
  int64_t b = blocksize(c);
  std::string mode = c.node().attr_string("mode", "DCR");
  if (mode == "DCR")
    return c.set_din(0, c.op("SpaceToDepth", {dy}, {Attribute::of_int("blocksize", b)}));
  ONYX_CHECK(mode == "CRD", "{}: attribute mode must be DCR or CRD, found '{}'", c.label(), mode);
  Value* sx = shape_value(c, x);
  auto dim = [&](int64_t i) { return c.op("Gather", {sx, c.ints({i})}); };
  Value* six = c.op("Concat", {dim(0), c.ints({-1}), dim(2), c.ints({b}), dim(3), c.ints({b})},
                    {Attribute::of_int("axis", 0)});
  Value* t = c.op("Transpose", {c.op("Reshape", {dy, six})},
                  {Attribute::of_ints("perm", {0, 1, 3, 5, 2, 4})});
  c.set_din(0, reshape_like(c, t, x));
}

// d SpaceToDepth = DepthToSpace(dy) in DCR mode, its inverse
void space_to_depth_grad(GradContext& c) {
  c.set_din(
      0, c.op("DepthToSpace", {c.dout(0)},
              {Attribute::of_int("blocksize", blocksize(c)), Attribute::of_string("mode", "DCR")}));
}

// d Trilu(x, k) = Trilu(dy, k): the same triangle passes, the rest was zeroed
void trilu_grad(GradContext& c) {
  std::vector<Value*> ins = {c.dout(0)};
  if (c.in(1)) ins.push_back(c.in(1));
  c.set_din(0, c.op("Trilu", ins, {Attribute::of_int("upper", c.node().attr_int("upper", 1))}));
}

// d GatherND(x, idx) = ScatterND(zeros(x), idx, dy, reduction=add); with batch_dims, dy's
// elements are added back at the x elements GatherND read from (gathered element ids)
void gather_nd_grad(GradContext& c) {
  require_scatter_add(c);
  Value *x = c.in(0), *idx = c.in(1), *dy = c.dout(0);
  int64_t batch_dims = c.node().attr_int("batch_dims", 0);
  if (batch_dims == 0)
    return c.set_din(0, c.op("ScatterND", {zeros_like(c, x), idx, dy},
                             {Attribute::of_string("reduction", "add")}));
  Value* ids =
      c.op("GatherND", {element_ids(c, x), idx}, {Attribute::of_int("batch_dims", batch_dims)});
  c.set_din(0, scatter_flat(c, dy, ids, true));
}

/// The reduction attribute of ScatterND / ScatterElements: none or add (their gradients);
/// onyx::Error for mul, max and min.
bool scatter_adds(const GradContext& c) {
  std::string r = c.node().attr_string("reduction", "none");
  ONYX_CHECK(r == "none" || r == "add",
             "{}: no gradient for reduction '{}'; supported reductions are none and add", c.label(),
             r);
  return r == "add";
}

// d ScatterND(x, idx, u): dx = dy with the written slices zeroed (none) or dy (add);
// du = GatherND(dy, idx). With reduction none, indices are assumed unique (duplicates leave
// ONNX's result undefined).
void scatter_nd_grad(GradContext& c) {
  Value *idx = c.in(1), *dy = c.dout(0);
  bool adds = scatter_adds(c);
  if (c.wants(0)) c.set_din(0, adds ? dy : c.op("ScatterND", {dy, idx, zeros_like(c, c.in(2))}));
  if (c.wants(2)) c.set_din(2, c.op("GatherND", {dy, idx}));
}

// d ScatterElements(x, idx, u, axis): dx = dy with the written elements zeroed (none) or dy
// (add); du = GatherElements(dy, idx, axis). Unique indices assumed with reduction none.
void scatter_elements_grad(GradContext& c) {
  Value *idx = c.in(1), *dy = c.dout(0);
  bool adds = scatter_adds(c);
  Attribute axis = Attribute::of_int("axis", c.node().attr_int("axis", 0));
  if (c.wants(0))
    c.set_din(0, adds ? dy : c.op("ScatterElements", {dy, idx, zeros_like(c, c.in(2))}, {axis}));
  if (c.wants(2)) c.set_din(2, c.op("GatherElements", {dy, idx}, {axis}));
}

// d TopK(x).values = ScatterElements(zeros(x), indices, dy, axis): each value goes back to the
// element it was taken from (indices within a row are distinct)
void top_k_grad(GradContext& c) {
  Value* x = c.in(0);
  Attribute axis = Attribute::of_int("axis", c.node().attr_int("axis", -1));
  c.set_din(0, c.op("ScatterElements", {zeros_like(c, x), c.ensure_out(1), c.dout(0)}, {axis}));
}

// d ReverseSequence(x, lens) = ReverseSequence(dy, lens): reversing a prefix is its own inverse
void reverse_sequence_grad(GradContext& c) {
  const Node& n = c.node();
  c.set_din(0, c.op("ReverseSequence", {c.dout(0), c.in(1)},
                    {Attribute::of_int("batch_axis", n.attr_int("batch_axis", 1)),
                     Attribute::of_int("time_axis", n.attr_int("time_axis", 0))}));
}

// d CenterCropPad(x, shape) = CenterCropPad(dy, x's extent on the same axes): the crop offset
// (in - out) / 2 and the pad offset (out - in) / 2 undo each other
void center_crop_pad_grad(GradContext& c) {
  Value* x = c.in(0);
  Attrs attrs;
  Value* extent = shape_value(c, x);
  if (c.node().has_attr("axes")) {
    std::vector<int64_t> axes = c.node().attr_ints("axes");
    attrs.push_back(Attribute::of_ints("axes", axes));
    extent = c.op("Gather", {extent, c.ints(axes)});
  }
  c.set_din(0, c.op("CenterCropPad", {c.dout(0), extent}, attrs));
}

}  // namespace

void add_shape_rules(RuleTable& t) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) t.add(op, reshape_grad);
  t.add("Transpose", transpose_grad);
  t.add("Concat", concat_grad);
  t.add("Split", split_grad);
  t.add("Slice", slice_grad);
  t.add("Gather", gather_grad);
  t.add("GatherElements", gather_elements_grad);
  t.add("Expand", expand_grad);
  t.add("Tile", tile_grad);
  t.add("Pad", pad_grad);
  t.add("DepthToSpace", depth_to_space_grad);
  t.add("SpaceToDepth", space_to_depth_grad);
  t.add("Trilu", trilu_grad);
  t.add("GatherND", gather_nd_grad);
  t.add("ScatterND", scatter_nd_grad);
  t.add("ScatterElements", scatter_elements_grad);
  t.add("TopK", top_k_grad);
  t.add("ReverseSequence", reverse_sequence_grad);
  t.add("CenterCropPad", center_crop_pad_grad);
}

}  // namespace onyx::autodiff
