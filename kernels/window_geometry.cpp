// ONNX's window arithmetic for the convolution and pooling ops (kernels/window_geometry.h).
#include "kernels/window_geometry.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <vector>

namespace onyx {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// Checks X and W and fills what both ops share: spatial sizes, kernel, strides, dilations.
ConvGeometry base_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                           const Tensor& W, bool transpose) {
  const int64_t rank = static_cast<int64_t>(x.size());
  ONYX_CHECK(rank >= 3 && rank <= 5, "[{}] X must have rank 3, 4 or 5, got shape {}", ctx.label(),
             shape_str(x));
  ONYX_CHECK(W.rank() == rank, "[{}] W must have the rank of X ({}), got shape {}", ctx.label(),
             rank, shape_str(W.shape()));
  ConvGeometry g;
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

}  // namespace

void check_attr_values(const std::string& label, const char* name, const Shape& v, int64_t lo,
                       int64_t hi) {
  for (int64_t x : v)
    ONYX_CHECK(x >= lo && x <= hi, "[{}] attribute '{}' holds [{}]: {} is outside [{}, {}]", label,
               name, fmt::join(v, ", "), x, lo, hi);
}

WindowSteps::WindowSteps(const std::string& label, const Shape& strides, const Shape& dilations,
                         const Shape& pads, size_t nsp)
    : stride(strides.empty() ? Shape(nsp, 1) : strides),
      dil(dilations.empty() ? Shape(nsp, 1) : dilations) {
  ONYX_CHECK(stride.size() == nsp && dil.size() == nsp && (pads.empty() || pads.size() == 2 * nsp),
             "[{}] strides {}, dilations {} or pads {} do not fit {} spatial dims", label,
             shape_str(strides), shape_str(dilations), shape_str(pads), nsp);
  for (size_t i = 0; i < nsp; ++i)
    ONYX_CHECK(stride[i] >= 1 && dil[i] >= 1, "[{}] strides and dilations must be >= 1", label);
}

ConvAttrs::ConvAttrs(const Node& n)
    : auto_pad(n.attr_string("auto_pad", "NOTSET")),
      kernel_shape(n.attr_ints("kernel_shape")),
      strides(n.attr_ints("strides")),
      dilations(n.attr_ints("dilations")),
      pads(n.attr_ints("pads")),
      output_padding(n.attr_ints("output_padding")),
      output_shape(n.attr_ints("output_shape")),
      group(n.attr_int("group", 1)) {}

bool ConvGeometry::pads_nonnegative() const {
  auto ok = [](int64_t p) { return p >= 0; };
  return std::all_of(pad_l.begin(), pad_l.end(), ok) && std::all_of(pad_r.begin(), pad_r.end(), ok);
}

ConvGeometry conv_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                           const Tensor& W) {
  ConvGeometry g = base_geometry(ctx, a, x, W, false);
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

ConvGeometry conv_transpose_geometry(KernelContext& ctx, const ConvAttrs& a, const Shape& x,
                                     const Tensor& W) {
  ConvGeometry g = base_geometry(ctx, a, x, W, true);
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

void check_conv_weights(const KernelContext& ctx, const Tensor& X, const Tensor& W) {
  ONYX_CHECK(W.dtype() == X.dtype(), "[{}] X and W must have one dtype, got {} and {}",
             ctx.label(), dtype_name(X.dtype()), dtype_name(W.dtype()));
}

void check_conv_bias(const KernelContext& ctx, const Tensor& X, const Tensor* B, int64_t M) {
  ONYX_CHECK(!B || (B->rank() == 1 && B->dim(0) == M && B->dtype() == X.dtype()),
             "[{}] B must be a 1-D {} tensor of {} values, got {} {}", ctx.label(),
             dtype_name(X.dtype()), M, B ? dtype_name(B->dtype()) : "",
             B ? shape_str(B->shape()) : "");
}

void check_conv_residual(const KernelContext& ctx, const Tensor& X, const Tensor* Z,
                         const Shape& out) {
  ONYX_CHECK(!Z || (Z->shape() == out && Z->dtype() == X.dtype()),
             "[{}] Z must be a {} tensor of the output's shape {}, got {} {}", ctx.label(),
             dtype_name(X.dtype()), shape_str(out), Z ? dtype_name(Z->dtype()) : "",
             Z ? shape_str(Z->shape()) : "");
}

ConvActivationParams parse_conv_activation(const Node& n) {
  ConvActivationParams a;
  using Kind = ConvActivationParams::Kind;
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

PoolAttrs::PoolAttrs(const KernelInfo& info, bool lp_pool)
    : auto_pad(info.node.attr_string("auto_pad", "NOTSET")),
      kernel_shape(info.node.attr_ints("kernel_shape")),
      strides(info.node.attr_ints("strides")),
      dilations(info.node.attr_ints("dilations")),
      pads(info.node.attr_ints("pads")),
      ceil_mode(info.node.attr_int("ceil_mode", 0) != 0),
      count_include_pad(info.node.attr_int("count_include_pad", 0) != 0),
      column_major(info.node.attr_int("storage_order", 0) != 0),
      // LpPool-1 has a float p; later versions an int.
      p(!lp_pool          ? 0.0
        : info.opset < 2 ? info.node.attr_float("p", 2.0f)
                         : static_cast<double>(info.node.attr_int("p", 2))) {
  ONYX_CHECK(!kernel_shape.empty(), "[{}] attribute kernel_shape is required", info.label());
  // Bounds that keep the window arithmetic ((k - 1) * dilation, pads) inside int64.
  check_attr_values(info.label(), "kernel_shape", kernel_shape, 1, INT32_MAX);
  check_attr_values(info.label(), "strides", strides, 1, INT32_MAX);
  check_attr_values(info.label(), "dilations", dilations, 1, INT32_MAX);
  check_attr_values(info.label(), "pads", pads, 0, INT32_MAX);
}

/// Geometry for X of (logical) shape [N, C, spatial...].
PoolGeometry pool_geometry(KernelContext& ctx, const PoolAttrs& a, const Shape& x) {
  size_t nsp = a.kernel_shape.size();
  ONYX_CHECK(x.size() == nsp + 2 && nsp >= 1 && nsp <= 3,
             "[{}] X of shape {} does not fit kernel_shape {} (expected rank {})", ctx.label(),
             shape_str(x), shape_str(a.kernel_shape), nsp + 2);
  PoolGeometry g;
  g.N = x[0];
  g.C = x[1];
  g.in.assign(x.begin() + 2, x.end());
  g.k = a.kernel_shape;
  WindowSteps steps(ctx.label(), a.strides, a.dilations, a.pads, nsp);
  g.stride = std::move(steps.stride);
  g.dil = std::move(steps.dil);
  g.pad_l.assign(nsp, 0);
  g.pad_r.assign(nsp, 0);
  g.out.resize(nsp);
  for (size_t i = 0; i < nsp; ++i) {
    ONYX_CHECK(g.k[i] >= 1, "[{}] kernel_shape must be >= 1, got {}", ctx.label(),
               shape_str(g.k));
    int64_t ek = (g.k[i] - 1) * g.dil[i] + 1, s = g.stride[i];
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      g.out[i] = (g.in[i] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + ek - g.in[i]);
      g.pad_l[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_r[i] = total - g.pad_l[i];
      continue;
    }
    if (a.auto_pad != "VALID" && !a.pads.empty()) {
      g.pad_l[i] = a.pads[i];
      g.pad_r[i] = a.pads[i + nsp];
    }
    int64_t span = g.in[i] + g.pad_l[i] + g.pad_r[i] - ek;
    ONYX_CHECK(span >= 0, "[{}] kernel {} (dilated) is larger than the padded input {}",
               ctx.label(), shape_str(g.k), shape_str(x));
    g.out[i] = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // The last window must start inside the input or the left padding.
    if (a.ceil_mode && (g.out[i] - 1) * s >= g.in[i] + g.pad_l[i]) --g.out[i];
  }
  return g;
}

}  // namespace onyx
