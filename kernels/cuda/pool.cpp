// MaxPool (with its Indices output), AveragePool, LpPool, GlobalAveragePool and GlobalMaxPool
// on our own kernels (pool.cu), not cuDNN: cudnnPoolingForward takes one symmetric pad per dim
// and no dilation, ceil_mode or Indices, so ONNX's asymmetric pads (SAME_UPPER), ceil_mode
// windows, dilations and Indices would each need a way around it, while one direct kernel
// follows the ONNX reference exactly, as the CPU kernel's own loops do. Pooling is memory-bound;
// a thread per output reading its window from L1/L2 is what cuDNN's NCHW pooling does too.
// Geometry, attributes, opset ranges and messages mirror kernels/cpu/pool.cpp.
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/pool_launch.h"

namespace onyx::cuda {
namespace {

using pooling::Kind;

pooling::DType pool_dtype(DataType dt) {
  switch (dt) {
    case DataType::Float: return pooling::DType::F32;
    case DataType::Float16: return pooling::DType::F16;
    case DataType::BFloat16: return pooling::DType::BF16;
    case DataType::Double: return pooling::DType::F64;
    case DataType::Int8: return pooling::DType::I8;
    case DataType::UInt8: return pooling::DType::U8;
    default: ONYX_THROW("[cuda] pooling has no {} kernel", dtype_name(dt));
  }
}

/// Every value of an INTS attribute in [lo, hi] (kernels/cpu/window.h).
void check_attr_values(const std::string& label, const char* name, const Shape& v, int64_t lo,
                       int64_t hi) {
  for (int64_t x : v)
    ONYX_CHECK(x >= lo && x <= hi, "[{}] attribute '{}' holds [{}]: {} is outside [{}, {}]", label,
               name, fmt::join(v, ", "), x, lo, hi);
}

struct PoolAttrs {
  std::string auto_pad;
  Shape kernel_shape, strides, dilations, pads;
  bool ceil_mode, count_include_pad, column_major;
  double p;
  PoolAttrs(const KernelInfo& info, Kind kind)
      : auto_pad(info.node.attr_string("auto_pad", "NOTSET")),
        kernel_shape(info.node.attr_ints("kernel_shape")),
        strides(info.node.attr_ints("strides")),
        dilations(info.node.attr_ints("dilations")),
        pads(info.node.attr_ints("pads")),
        ceil_mode(info.node.attr_int("ceil_mode", 0) != 0),
        count_include_pad(info.node.attr_int("count_include_pad", 0) != 0),
        column_major(info.node.attr_int("storage_order", 0) != 0),
        // LpPool-1 has a float p; later versions an int.
        p(kind != Kind::Lp    ? 0.0
          : info.opset < 2    ? info.node.attr_float("p", 2.0f)
                              : static_cast<double>(info.node.attr_int("p", 2))) {
    ONYX_CHECK(!kernel_shape.empty(), "[{}] attribute kernel_shape is required", info.label());
    // Bounds that keep the window arithmetic ((k - 1) * dilation, pads) inside int64.
    check_attr_values(info.label(), "kernel_shape", kernel_shape, 1, INT32_MAX);
    check_attr_values(info.label(), "strides", strides, 1, INT32_MAX);
    check_attr_values(info.label(), "dilations", dilations, 1, INT32_MAX);
    check_attr_values(info.label(), "pads", pads, 0, INT32_MAX);
  }
};

/// The window of X (shape [N, C, spatial...]) as the CPU kernel computes it (pool_geometry),
/// spatial vectors padded in front to three dims.
pooling::Window pool_window(KernelContext& ctx, const PoolAttrs& a, const Shape& x) {
  const size_t nsp = a.kernel_shape.size();
  ONYX_CHECK(x.size() == nsp + 2 && nsp >= 1 && nsp <= 3,
             "[{}] X of shape {} does not fit kernel_shape {} (expected rank {})", ctx.label(),
             shape_str(x), shape_str(a.kernel_shape), nsp + 2);
  const Shape stride = a.strides.empty() ? Shape(nsp, 1) : a.strides;
  const Shape dil = a.dilations.empty() ? Shape(nsp, 1) : a.dilations;
  ONYX_CHECK(stride.size() == nsp && dil.size() == nsp && (a.pads.empty() || a.pads.size() == 2 * nsp),
             "[{}] strides {}, dilations {} or pads {} do not fit {} spatial dims", ctx.label(),
             shape_str(a.strides), shape_str(a.dilations), shape_str(a.pads), nsp);
  pooling::Window w;
  for (int d = 0; d < 3; ++d) {
    w.in[d] = w.out[d] = w.k[d] = w.stride[d] = w.dil[d] = 1;
    w.pad_l[d] = w.pad_r[d] = 0;
  }
  const size_t lead = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    const size_t d = lead + i;
    const int64_t in = x[i + 2], k = a.kernel_shape[i], s = stride[i];
    ONYX_CHECK(s >= 1 && dil[i] >= 1, "[{}] strides and dilations must be >= 1", ctx.label());
    const int64_t ek = (k - 1) * dil[i] + 1;
    int64_t pl = 0, pr = 0, out;
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      out = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + ek - in);
      pl = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pr = total - pl;
    } else {
      if (a.auto_pad != "VALID" && !a.pads.empty()) {
        pl = a.pads[i];
        pr = a.pads[i + nsp];
      }
      const int64_t span = in + pl + pr - ek;
      ONYX_CHECK(span >= 0, "[{}] kernel {} (dilated) is larger than the padded input {}",
                 ctx.label(), shape_str(a.kernel_shape), shape_str(x));
      out = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // The last window must start inside the input or the left padding.
      if (a.ceil_mode && (out - 1) * s >= in + pl) --out;
    }
    w.in[d] = in;
    w.out[d] = out;
    w.k[d] = k;
    w.stride[d] = s;
    w.dil[d] = dil[i];
    w.pad_l[d] = pl;
    w.pad_r[d] = pr;
  }
  return w;
}

/// MaxPool (Indices computed when output 1 is wanted), AveragePool, LpPool.
class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, Kind kind) : attrs_(info, kind), kind_(kind) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const pooling::Window w = pool_window(ctx, attrs_, X.shape());
    Shape out{X.dim(0), X.dim(1)};
    for (size_t d = 3 - (X.shape().size() - 2); d < 3; ++d) out.push_back(w.out[d]);
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    const bool want_idx = kind_ == Kind::Max && ctx.num_outputs() > 1 && ctx.output_wanted(1);
    Tensor* idx = want_idx ? &ctx.allocate_output(1, DataType::Int64, out) : nullptr;
    if (Y.numel() == 0) return;
    pooling::launch_pool(X.raw(), Y.raw(), idx ? idx->data<int64_t>() : nullptr,
                         X.dim(0) * X.dim(1), w, kind_, attrs_.count_include_pad,
                         attrs_.column_major, attrs_.p, pool_dtype(X.dtype()), stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  PoolAttrs attrs_;
  Kind kind_;
};

/// GlobalAveragePool / GlobalMaxPool: one value per (image, channel) plane.
template <bool kMax>
void global_pool(KernelContext& ctx) {
  const Tensor& X = ctx.required_input(0);
  ONYX_CHECK(X.rank() >= 3, "[{}] X must have rank >= 3 ([N, C, spatial...]), got shape {}",
             ctx.label(), shape_str(X.shape()));
  Shape out(X.rank(), 1);
  out[0] = X.dim(0);
  out[1] = X.dim(1);
  Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
  const int64_t planes = X.dim(0) * X.dim(1);
  if (planes == 0) return;
  pooling::launch_global_pool(X.raw(), Y.raw(), planes, X.numel() / planes, kMax,
                              pool_dtype(X.dtype()), stream_of(ctx));
  ONYX_CUDA_CHECK(cudaGetLastError());
}

KernelFactory pool_factory(Kind kind) {
  return [kind](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<PoolKernel>(i, kind);
  };
}

}  // namespace

void register_pool_kernels(KernelRegistry& r) {
  const std::vector<DataType> floats{DataType::Float, DataType::Float16, DataType::BFloat16,
                                     DataType::Double};
  r.add({.op_type = "MaxPool",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = floats + std::vector<DataType>{DataType::Int8, DataType::UInt8},
         .create = pool_factory(Kind::Max)});
  r.add({.op_type = "AveragePool",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = floats,
         .create = pool_factory(Kind::Avg)});
  r.add({.op_type = "LpPool",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = floats,
         .create = pool_factory(Kind::Lp)});
  r.add({.op_type = "GlobalAveragePool",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = floats,
         .create = function_factory(global_pool<false>)});
  r.add({.op_type = "GlobalMaxPool",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = floats,
         .create = function_factory(global_pool<true>)});
}

}  // namespace onyx::cuda
