// ConstantOfShape and Trilu on CUDA: the masks torch.onnx writes for attention (a filled
// tensor of the sequence's shape, a causal triangle) run on the device instead of making a
// round trip to the host. Both move elements as opaque words of the dtype's width.
#include <algorithm>
#include <climits>
#include <cstring>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/fill_launch.h"

namespace onyx::cuda {
namespace {

bool word_sized(DataType dt) {
  if (dt == DataType::String || dt == DataType::Undefined) return false;
  const size_t w = dtype_size(dt);
  return w == 1 || w == 2 || w == 4 || w == 8;
}

class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) {
    Tensor value = Tensor::scalar<float>(0.0f);
    if (const Attribute* a = info.node.attr("value")) {
      ONYX_CHECK(a->t.numel() == 1, "[{}] value should hold one element but has shape {}", info.label(),
                 shape_str(a->t.shape()));
      value = a->t;
    }
    if (!word_sized(value.dtype()))
      throw NotImplemented(fmt::format("[{}] ConstantOfShape of {} has no CUDA kernel", info.label(),
                                       dtype_name(value.dtype())));
    dtype_ = value.dtype();
    std::memcpy(&pattern_, value.raw(), dtype_size(dtype_));
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& s = ctx.required_input(0);  // on the host (KernelDef::host_inputs)
    ONYX_CHECK(s.rank() == 1, "[{}] shape input should be 1-D but has shape {}", ctx.label(), shape_str(s.shape()));
    Shape shape = s.to_int64_vector();
    for (int64_t d : shape) ONYX_CHECK(d >= 0, "[{}] shape {} has a negative dim", ctx.label(), shape_str(shape));
    Tensor& out = ctx.allocate_output(0, dtype_, shape);
    if (out.numel() == 0) return;
    fill::launch_fill(out.raw(), out.numel(), static_cast<int>(dtype_size(dtype_)), pattern_, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  DataType dtype_ = DataType::Float;
  uint64_t pattern_ = 0;
};

class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) : upper_(info.node.attr_int("upper", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 2, "[{}] input should have rank >= 2 but has shape {}", ctx.label(), shape_str(x.shape()));
    ONYX_CHECK(word_sized(x.dtype()), "[{}] Trilu of {} has no CUDA kernel", ctx.label(), dtype_name(x.dtype()));
    int64_t k = 0;
    if (const Tensor* t = ctx.input(1)) {  // on the host (KernelDef::host_inputs)
      ONYX_CHECK(t->numel() == 1, "[{}] k should be a scalar but has shape {}", ctx.label(), shape_str(t->shape()));
      // Past every dimension any k acts the same; clamped so i + k cannot overflow.
      k = std::clamp<int64_t>(t->to_int64_vector()[0], -(int64_t{1} << 62), int64_t{1} << 62);
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    const int64_t m = x.dim(-1);
    if (y.numel() == 0) return;
    fill::launch_trilu(x.raw(), y.raw(), x.numel() / m, x.dim(-2), m, k, upper_,
                       static_cast<int>(dtype_size(x.dtype())), stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  bool upper_;
};

std::vector<DataType> word_types() {
  return {DataType::Float,  DataType::Double, DataType::Float16, DataType::BFloat16, DataType::Int8,
          DataType::Int16,  DataType::Int32,  DataType::Int64,   DataType::UInt8,    DataType::UInt16,
          DataType::UInt32, DataType::UInt64, DataType::Bool};
}

}  // namespace

void register_fill_kernels(KernelRegistry& r) {
  r.add({.op_type = "ConstantOfShape", .since = 9, .provider = kProvider, .type_input = 0,
         .types = {DataType::Int64}, .create = make_factory<ConstantOfShapeKernel>(), .host_inputs = {0}});
  r.add({.op_type = "Trilu", .since = 14, .provider = kProvider, .type_input = 0, .types = word_types(),
         .create = make_factory<TriluKernel>(), .host_inputs = {1}});
}

}  // namespace onyx::cuda
