// Softmax, LogSoftmax and Hardmax on CUDA, mirroring kernels/cpu/softmax.cpp: opset < 13
// coerces the input to 2-D at `axis` (default 1) and normalises each row; opset >= 13 works
// along `axis` (default -1). A scalar is a one-element row.
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/softmax_launch.h"

namespace onyx::cuda {
namespace {

std::optional<sm::DType> sm_dtype(DataType t) {
  switch (t) {
    case DataType::Float: return sm::DType::F32;
    case DataType::Double: return sm::DType::F64;
    case DataType::Float16: return sm::DType::F16;
    case DataType::BFloat16: return sm::DType::BF16;
    default: return std::nullopt;
  }
}

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(const KernelInfo& info, sm::Kind kind)
      : kind_(kind), coerce_2d_(info.opset < 13), axis_(info.node.attr_int("axis", info.opset < 13 ? 1 : -1)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const int64_t rank = std::max<int64_t>(x.rank(), 1);
    ONYX_CHECK(axis_ >= -rank && axis_ < rank, "[{}] axis {} is out of range for an input of rank {}",
               ctx.label(), axis_, rank);
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    const Shape shape = x.rank() ? x.shape() : Shape{1};
    // [outer, n, inner] around the axis; opset < 13: [prod(shape[:axis]), prod(shape[axis:]), 1].
    int64_t outer = 1, n = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis) outer *= shape[i];
      else if (i == axis || coerce_2d_) n *= shape[i];
      else inner *= shape[i];
    }
    if (y.numel() == 0) return;
    const auto dt = sm_dtype(x.dtype());
    ONYX_CHECK(dt, "[{}] the CUDA kernel does not take {} input", ctx.label(), dtype_name(x.dtype()));
    sm::launch_softmax(kind_, *dt, x.raw(), y.raw(), outer, n, inner, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  sm::Kind kind_;
  bool coerce_2d_;
  int64_t axis_;
};

}  // namespace

void register_softmax_kernels(KernelRegistry& r) {
  const std::pair<const char*, sm::Kind> ops[] = {
      {"Softmax", sm::Kind::Softmax}, {"LogSoftmax", sm::Kind::LogSoftmax}, {"Hardmax", sm::Kind::Hardmax}};
  for (const auto& [op, kind] : ops) {
    r.add({.op_type = op,
           .domain = "",
           .since = 1,
           .until = INT_MAX,
           .provider = kProvider,
           .type_input = 0,
           .types = float_types(),
           .create = [kind = kind](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<SoftmaxKernel>(info, kind);
           }});
  }
}

}  // namespace onyx::cuda
