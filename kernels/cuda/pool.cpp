// MaxPool (with its Indices output), AveragePool, LpPool, GlobalAveragePool and GlobalMaxPool
// on our own kernels (pool.cu), not cuDNN: cudnnPoolingForward takes one symmetric pad per dim
// and no dilation, ceil_mode or Indices, so ONNX's asymmetric pads (SAME_UPPER), ceil_mode
// windows, dilations and Indices would each need a way around it, while one direct kernel
// follows the ONNX reference exactly, as the CPU kernel's own loops do. Pooling is memory-bound;
// a thread per output reading its window from L1/L2 is what cuDNN's NCHW pooling does too.
// Attributes and geometry are the CPU kernel's (kernels/window_geometry.h); opset ranges and
// messages mirror kernels/cpu/pool.cpp.
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/pool_launch.h"
#include "kernels/window_geometry.h"

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

/// The window of X (shape [N, C, spatial...]) as the CPU kernel computes it
/// (kernels/window_geometry.h), spatial vectors padded in front to three dims.
pooling::Window pool_window(KernelContext& ctx, const PoolAttrs& a, const Shape& x) {
  const PoolGeometry g = pool_geometry(ctx, a, x);
  pooling::Window w;
  for (int d = 0; d < 3; ++d) {
    w.in[d] = w.out[d] = w.k[d] = w.stride[d] = w.dil[d] = 1;
    w.pad_l[d] = w.pad_r[d] = 0;
  }
  const size_t nsp = g.in.size(), lead = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    const size_t d = lead + i;
    w.in[d] = g.in[i];
    w.out[d] = g.out[i];
    w.k[d] = g.k[i];
    w.stride[d] = g.stride[i];
    w.dil[d] = g.dil[i];
    w.pad_l[d] = g.pad_l[i];
    w.pad_r[d] = g.pad_r[i];
  }
  return w;
}

/// MaxPool (Indices computed when output 1 is wanted), AveragePool, LpPool.
class PoolKernel final : public Kernel {
 public:
  PoolKernel(const KernelInfo& info, Kind kind) : attrs_(info, kind == Kind::Lp), kind_(kind) {}

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
