// Reshape, Flatten, Squeeze, Unsqueeze and Identity: their output is a view of the input with
// another shape, so no byte is read and one implementation serves every provider (the
// shape-like operands are read on the host: KernelDef::host_inputs).
#include "kernels/view_ops.h"

#include <climits>

#include "kernels/shape_util.h"

namespace onyx {
namespace {

/// The shape input of Reshape resolved against the data's shape (0 copies, -1 infers).
Shape reshape_target(const KernelContext& ctx, const Shape& in, const Tensor& shape_t,
                     bool allowzero) {
  ONYX_CHECK(shape_t.rank() == 1, "[{}] shape input should be 1-D but has shape {}", ctx.label(),
             shape_str(shape_t.shape()));
  Shape out = shape_t.to_int64_vector();
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      ONYX_CHECK(i < in.size(), "[{}] shape {} copies dim {} from input shape {}", ctx.label(),
                 shape_str(out), i, shape_str(in));
      out[i] = in[i];
    }
    if (out[i] == -1) {
      ONYX_CHECK(infer < 0, "[{}] shape {} has more than one -1", ctx.label(), shape_str(out));
      infer = static_cast<int64_t>(i);
      continue;
    }
    ONYX_CHECK(out[i] >= 0, "[{}] shape {} has a negative dim", ctx.label(), shape_str(out));
    ONYX_CHECK(!__builtin_mul_overflow(known, out[i], &known), "[{}] shape {} has more elements than int64 holds",
               ctx.label(), shape_str(out));
  }
  int64_t numel = shape_numel(in);
  if (infer >= 0) {
    ONYX_CHECK(known != 0 && numel % known == 0, "[{}] cannot reshape {} to {}", ctx.label(),
               shape_str(in), shape_str(out));
    out[infer] = numel / known;
  }
  ONYX_CHECK(shape_numel(out) == numel, "[{}] cannot reshape {} ({} elements) to {}", ctx.label(),
             shape_str(in), numel, shape_str(out));
  return out;
}

class ReshapeKernel final : public Kernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info)
      : allowzero_(info.opset >= 14 && info.node.attr_int("allowzero", 0) != 0) {
    if (info.opset < 5) {  // Reshape-1 takes the shape as an attribute
      auto s = info.node.attr_ints("shape");
      shape_attr_ = Tensor::from_vector<int64_t>({static_cast<int64_t>(s.size())}, s);
    }
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& shape = shape_attr_.defined() ? shape_attr_ : ctx.required_input(1);
    ctx.set_output(0, Datum(x.reshape(reshape_target(ctx, x.shape(), shape, allowzero_))));
  }

 private:
  bool allowzero_;
  Tensor shape_attr_;
};

class FlattenKernel final : public Kernel {
 public:
  explicit FlattenKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 1)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    int64_t r = x.rank();
    ONYX_CHECK(axis_ >= -r && axis_ <= r, "[{}] axis {} is out of range for input shape {}",
               ctx.label(), axis_, shape_str(x.shape()));
    auto a = static_cast<size_t>(axis_ < 0 ? axis_ + r : axis_);
    Shape s{onyx::dims_product(x.shape(), 0, a), onyx::dims_product(x.shape(), a, x.shape().size())};
    ctx.set_output(0, Datum(x.reshape(s)));
  }

 private:
  int64_t axis_;
};

/// Normalised, duplicate-free axes from an optional int64 input against `rank`.
std::vector<bool> axes_mask(const KernelContext& ctx, const Tensor& axes, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : axes.to_int64_vector()) {
    auto n = static_cast<size_t>(onyx::normalize_axis(a, rank, ctx.label()));
    ONYX_CHECK(!mask[n], "[{}] axis {} appears twice in axes", ctx.label(), a);
    mask[n] = true;
  }
  return mask;
}

void squeeze_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const Tensor* axes = ctx.input(1);
  Shape out;
  if (!axes) {
    for (int64_t d : x.shape())
      if (d != 1) out.push_back(d);
  } else {
    auto mask = axes_mask(ctx, *axes, x.rank());
    for (size_t i = 0; i < mask.size(); ++i) {
      ONYX_CHECK(!mask[i] || x.shape()[i] == 1, "[{}] cannot squeeze axis {} of size {} (shape {})",
                 ctx.label(), i, x.shape()[i], shape_str(x.shape()));
      if (!mask[i]) out.push_back(x.shape()[i]);
    }
  }
  ctx.set_output(0, Datum(x.reshape(out)));
}

void unsqueeze_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const Tensor& axes = ctx.required_input(1);
  auto mask = axes_mask(ctx, axes, x.rank() + axes.numel());
  Shape out;
  size_t next = 0;
  for (bool inserted : mask) out.push_back(inserted ? 1 : x.shape()[next++]);
  ctx.set_output(0, Datum(x.reshape(out)));
}

void identity_compute(KernelContext& ctx) {
  const Datum* d = ctx.input_datum(0);
  ctx.set_output(0, d ? *d : Datum());
}

}  // namespace

void register_view_kernels(KernelRegistry& r, const std::string& provider, const std::vector<DataType>& types) {
  auto add = [&](const char* op, KernelFactory f, std::vector<int> host_inputs) {
    r.add({.op_type = op, .since = 1, .provider = provider, .type_input = 0, .types = types,
           .create = std::move(f), .host_inputs = std::move(host_inputs)});
  };
  add("Reshape", make_factory<ReshapeKernel>(), {1});
  add("Flatten", make_factory<FlattenKernel>(), {});
  add("Squeeze", function_factory(squeeze_compute), {1});
  add("Unsqueeze", function_factory(unsqueeze_compute), {1});
  add("Identity", function_factory(identity_compute), {});
}

}  // namespace onyx
