// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp, ReduceSumSquare and ArgMax/ArgMin on CUDA. Opsets, dtypes, attributes and
// messages mirror kernels/cpu/reduce.cpp and arg_reduce.cpp: axes come as input 1, read on the
// host (graph/canonicalize.cpp turns the older `axes` attribute into it; an attribute left on
// the node is honoured too). The input is never permuted: the shape folds into rows, columns
// or a general strided layout (reduce_launch.h) that the device code walks in place.
#include <climits>
#include <optional>

#include "kernels/cuda/cuda_common.h"
#include "kernels/shape_util.h"
#include "kernels/cuda/reduce_launch.h"
#include "kernels/reduce_axes.h"

namespace onyx::cuda {
namespace {

std::optional<red::DType> red_dtype(DataType t) {
  switch (t) {
    case DataType::Float: return red::DType::F32;
    case DataType::Double: return red::DType::F64;
    case DataType::Float16: return red::DType::F16;
    case DataType::BFloat16: return red::DType::BF16;
    case DataType::Int8: return red::DType::I8;
    case DataType::Int16: return red::DType::I16;
    case DataType::Int32: return red::DType::I32;
    case DataType::Int64: return red::DType::I64;
    case DataType::UInt8: return red::DType::U8;
    case DataType::UInt16: return red::DType::U16;
    case DataType::UInt32: return red::DType::U32;
    case DataType::UInt64: return red::DType::U64;
    case DataType::Bool: return red::DType::Bool;
    default: return std::nullopt;
  }
}

/// The onyx dtypes a predicate over red::DType accepts (for registrations).
template <typename Pred>
std::vector<DataType> dtypes_where(Pred pred) {
  std::vector<DataType> out;
  for (DataType t : numeric_types() + std::vector<DataType>{DataType::Bool})
    if (auto d = red_dtype(t); d && pred(*d)) out.push_back(t);
  return out;
}

/// Folds `shape` with its reduced axes into the layout the device code walks: size-1 axes
/// dropped, neighbours of the same kind merged, then rows, columns or the general form.
red::Geom make_geom(const Shape& shape, const std::vector<bool>& reduced, const std::string& who) {
  red::Geom g;
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t i = 0; i < shape.size(); ++i) {
    (reduced[i] ? g.red_numel : g.out_numel) *= shape[i];
    if (shape[i] == 1) continue;
    if (!dims.empty() && red.back() == reduced[i]) {
      dims.back() *= shape[i];
    } else {
      dims.push_back(shape[i]);
      red.push_back(reduced[i]);
    }
  }
  g.small = g.out_numel * g.red_numel < (int64_t(1) << 31);
  const size_t n = dims.size();
  if (g.red_numel == 0 || g.out_numel == 0 || n == 0 || (n == 1) || (n == 2 && !red[0])) {
    g.layout = red::Layout::Rows;  // [outer, red] (red may be 1 or 0)
    return g;
  }
  if ((n == 2 && red[0]) || (n == 3 && !red[0])) {
    g.layout = red::Layout::Cols;
    g.inner = dims.back();
    return g;
  }
  g.layout = red::Layout::General;
  std::vector<int64_t> strides(n, 1);
  for (size_t i = n - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  for (size_t i = 0; i < n; ++i) {
    int& count = red[i] ? g.nred : g.nkept;
    ONYX_CHECK(count < red::kMaxDims,
               "[{}] this pattern of reduced axes splits the input into more than {} separate groups "
               "of kept or reduced axes, more than the CUDA kernel walks",
               who, 2 * red::kMaxDims);
    (red[i] ? g.red_dims : g.kept_dims)[count] = dims[i];
    (red[i] ? g.red_strides : g.kept_strides)[count] = strides[i];
    ++count;
  }
  g.innermost_reduced = red.back();
  return g;
}

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelInfo& info, red::Op op)
      : op_(op), attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const ReducedAxes r = reduced_axes(ctx, attrs_, x.shape());
    Tensor& y = ctx.allocate_output(0, x.dtype(), r.out);
    if (y.numel() == 0) return;
    const auto dt = red_dtype(x.dtype());
    ONYX_CHECK(dt && red::reduce_supports(op_, *dt), "[{}] the CUDA kernel does not take {} input", ctx.label(),
               dtype_name(x.dtype()));
    const red::Geom g = make_geom(x.shape(), r.reduced, ctx.label());
    const size_t bytes = red::reduce_scratch_bytes(op_, *dt, g);
    Tensor scratch = bytes ? ctx.scratch(DataType::UInt8, {static_cast<int64_t>(bytes)}) : Tensor();
    red::launch_reduce(op_, *dt, x.raw(), y.raw(), g, bytes ? scratch.raw() : nullptr, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  red::Op op_;
  ReduceAttrs attrs_;
};

class ArgReduceKernel final : public Kernel {
 public:
  ArgReduceKernel(const KernelInfo& info, bool is_max) : is_max_(is_max), attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    int64_t axis = 0;
    const Shape out_shape = arg_reduce_shape(ctx, attrs_, x.shape(), axis);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[i];
    for (int64_t i = axis + 1; i < x.rank(); ++i) inner *= x.shape()[i];
    const int64_t n = x.shape()[axis];
    Tensor& y = ctx.allocate_output(0, DataType::Int64, out_shape);
    if (y.numel() == 0) return;
    const auto dt = red_dtype(x.dtype());
    ONYX_CHECK(dt && red::arg_supports(*dt), "[{}] the CUDA kernel does not take {} input", ctx.label(),
               dtype_name(x.dtype()));
    red::launch_arg_reduce(is_max_, attrs_.select_last, *dt, x.raw(), y.data<int64_t>(), outer, n, inner,
                           stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  bool is_max_;
  ArgReduceAttrs attrs_;
};

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  const std::pair<const char*, red::Op> ops[] = {
      {"ReduceSum", red::Op::Sum},         {"ReduceMean", red::Op::Mean},
      {"ReduceMax", red::Op::Max},         {"ReduceMin", red::Op::Min},
      {"ReduceProd", red::Op::Prod},       {"ReduceL1", red::Op::L1},
      {"ReduceL2", red::Op::L2},           {"ReduceLogSum", red::Op::LogSum},
      {"ReduceLogSumExp", red::Op::LogSumExp}, {"ReduceSumSquare", red::Op::SumSquare},
  };
  for (const auto& [name, op] : ops) {
    r.add({.op_type = name,
           .domain = "",
           .since = 1,
           .until = INT_MAX,
           .provider = kProvider,
           .type_input = 0,
           .types = dtypes_where([op = op](red::DType t) { return red::reduce_supports(op, t); }),
           .create = [op = op](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<ReduceKernel>(info, op);
           },
           .host_inputs = {1}});
  }
  for (bool is_max : {true, false}) {
    r.add({.op_type = is_max ? "ArgMax" : "ArgMin",
           .domain = "",
           .since = 1,
           .until = INT_MAX,
           .provider = kProvider,
           .type_input = 0,
           .types = dtypes_where(red::arg_supports),
           .create = [is_max](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<ArgReduceKernel>(info, is_max);
           }});
  }
}

}  // namespace onyx::cuda
