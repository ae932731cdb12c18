// CUDA Gather, GatherElements, ScatterElements (and the deprecated Scatter) and ScatterND:
// shapes, attributes and checks as kernels/cpu/gather_scatter.cpp, device code in
// gather_scatter.cu.
//
// Out-of-range indices: indices are device data, and checking them on the host would cost a
// copy and a stream synchronisation every run. So on the device an out-of-range index reads
// zeros (Gather, GatherElements) or its update is skipped (ScatterElements, ScatterND); no
// error is raised. Indices known when the session is built (initializers) are checked on the
// host with the CPU kernels' errors. Scatters with reduction 'none' and duplicate indices keep
// one of the colliding updates (which one is unspecified, as in ONNX); reductions are atomic,
// so float sums and products may round differently from the CPU's sequential order.
#include <algorithm>
#include <optional>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/gather_scatter_launch.h"
#include "kernels/index_checks.h"
#include "kernels/shape_util.h"

namespace onyx::cuda {
namespace {

using gs::GsType;
using gs::Reduction;

std::optional<GsType> gs_type(DataType t) {
  switch (t) {
    case DataType::Float: return GsType::F32;
    case DataType::Double: return GsType::F64;
    case DataType::Float16: return GsType::F16;
    case DataType::BFloat16: return GsType::BF16;
    case DataType::Int8: return GsType::I8;
    case DataType::Int16: return GsType::I16;
    case DataType::Int32: return GsType::I32;
    case DataType::Int64: return GsType::I64;
    case DataType::UInt8: return GsType::U8;
    case DataType::UInt16: return GsType::U16;
    case DataType::UInt32: return GsType::U32;
    case DataType::UInt64: return GsType::U64;
    case DataType::Bool: return GsType::Bool;
    default: return std::nullopt;
  }
}

bool aligned(const void* p, int64_t w) { return reinterpret_cast<uintptr_t>(p) % uint64_t(w) == 0; }

/// The widest word (up to 16 bytes) that rows of `row` elements of `eb` bytes split into,
/// given the pointers the rows start from: Gather of fp16 rows moves 16 bytes per access.
int widest_word(int eb, int64_t row, std::initializer_list<const void*> ptrs) {
  for (int w = 16; w > eb; w /= 2) {
    bool ok = w % eb == 0 && (row * eb) % w == 0;
    for (const void* p : ptrs) ok = ok && aligned(p, w);
    if (ok) return w;
  }
  return eb;
}

void check_index_dtype(const KernelContext& ctx, const Tensor& t, const char* what) {
  ONYX_CHECK(t.dtype() == DataType::Int64 || t.dtype() == DataType::Int32,
             "[{}] {} should be int32 or int64 but is {}", ctx.label(), what, dtype_name(t.dtype()));
}

/// Index values known when the kernel is built (input 1 is an initializer): checked on the
/// host against each run's axis size, with the CPU kernels' error.
class ConstIndices {
 public:
  explicit ConstIndices(const KernelInfo& info) {
    const Tensor* t = info.constant_input(1);
    if (!t || (t->dtype() != DataType::Int64 && t->dtype() != DataType::Int32)) return;
    values_ = t->to_int64_vector();
    known_ = true;
    for (int64_t v : values_) lo_ = std::min(lo_, v), hi_ = std::max(hi_, v);
  }
  void check(const KernelContext& ctx, int64_t dim, const char* what) const {
    if (!known_ || (lo_ >= -dim && hi_ < dim)) return;
    for (int64_t i : values_)
      ONYX_CHECK(i >= -dim && i < dim, "[{}] {} value {} is out of range [{}, {})", ctx.label(),
                 what, i, -dim, dim);
  }

 private:
  bool known_ = false;
  std::vector<int64_t> values_;
  int64_t lo_ = INT64_MAX, hi_ = INT64_MIN;
};

Reduction parse_reduction(const KernelInfo& info) {
  switch (parse_scatter_reduction(info)) {
    case ScatterReduction::Add: return Reduction::Add;
    case ScatterReduction::Mul: return Reduction::Mul;
    case ScatterReduction::Max: return Reduction::Max;
    case ScatterReduction::Min: return Reduction::Min;
    case ScatterReduction::None: break;
  }
  return Reduction::None;
}

/// The reduction's compute type (numeric or bool; any dtype without a reduction).
GsType scatter_type(const KernelContext& ctx, DataType t, Reduction r) {
  std::optional<GsType> g = gs_type(t);
  ONYX_CHECK(g || r == Reduction::None, "[{}] dtype {} is not supported",
             ctx.label(), dtype_name(t));
  return g.value_or(GsType::U8);
}

void check_launch() { ONYX_CUDA_CHECK(cudaGetLastError()); }

// ---- Gather ---------------------------------------------------------------------------------

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)), consts_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    int64_t dim = x.shape()[a];
    check_index_dtype(ctx, ind, "indices");
    consts_.check(ctx, dim, "indices");
    Shape out(x.shape().begin(), x.shape().begin() + static_cast<int64_t>(a));
    out.insert(out.end(), ind.shape().begin(), ind.shape().end());
    out.insert(out.end(), x.shape().begin() + static_cast<int64_t>(a) + 1, x.shape().end());
    int eb = elem_bytes(ctx, x.dtype());
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    int64_t outer = dims_product(x.shape(), 0, a),
            inner = dims_product(x.shape(), a + 1, x.shape().size());
    const int w = widest_word(eb, inner, {x.raw(), y.raw()});
    gs::launch_gather(w, x.raw(), ind.raw(), ind.dtype() == DataType::Int64, y.raw(), outer,
                      ind.numel(), dim, inner * eb / w, stream_of(ctx));
    check_launch();
  }

 private:
  int64_t axis_;
  ConstIndices consts_;
};

// ---- GatherElements, ScatterElements --------------------------------------------------------

/// GatherElements / ScatterElements: the shared checks, an int32/int64 index dtype and a
/// rank the kernel takes.
void check_device_element_indices(const KernelContext& ctx, const Tensor& x,
                                  const Tensor& ind) {
  check_element_indices(ctx, x, ind);
  check_index_dtype(ctx, ind, "indices");
  ONYX_CHECK(ind.rank() <= gs::kMaxDims, "[{}] indices of rank {}: the CUDA kernel takes up to {}",
             ctx.label(), ind.rank(), gs::kMaxDims);
}

gs::ElementsDesc elements_desc(const Tensor& x, const Tensor& ind, size_t axis) {
  gs::ElementsDesc d;
  d.rank = int(ind.rank());
  d.axis = int(axis);
  d.numel = ind.numel();
  d.axis_dim = x.shape()[axis];
  auto xs = contiguous_strides(x.shape());
  for (size_t q = 0; q < ind.shape().size(); ++q) {
    d.ind_dims[q] = ind.shape()[q];
    d.data_strides[q] = xs[q];
  }
  return d;
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), consts_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    check_device_element_indices(ctx, x, ind);
    consts_.check(ctx, x.shape()[a], "indices");
    const int eb = elem_bytes(ctx, x.dtype());
    Tensor& y = ctx.allocate_output(0, x.dtype(), ind.shape());
    if (y.numel() == 0) return;
    gs::launch_gather_elements(eb, x.raw(), ind.raw(), ind.dtype() == DataType::Int64, y.raw(),
                               elements_desc(x, ind, a), stream_of(ctx));
    check_launch();
  }

 private:
  int64_t axis_;
  ConstIndices consts_;
};

/// Copies the data into the output: the scatters update a copy.
Tensor& copy_of_data(KernelContext& ctx, const Tensor& x) {
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.nbytes() > 0)
    ONYX_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                    stream_of(ctx)));
  return y;
}

class ScatterElementsKernel final : public Kernel {
 public:
  explicit ScatterElementsKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), red_(parse_reduction(info)), consts_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    const Tensor& upd = ctx.required_input(2);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    check_device_element_indices(ctx, x, ind);
    check_element_updates(ctx, x, ind, upd);
    consts_.check(ctx, x.shape()[a], "indices");
    const int eb = elem_bytes(ctx, x.dtype());
    const GsType t = scatter_type(ctx, x.dtype(), red_);
    Tensor& y = copy_of_data(ctx, x);
    if (ind.numel() == 0) return;
    gs::launch_scatter_elements(t, eb, red_, y.raw(), ind.raw(), ind.dtype() == DataType::Int64,
                                upd.raw(), elements_desc(x, ind, a), stream_of(ctx));
    check_launch();
  }

 private:
  int64_t axis_;
  Reduction red_;
  ConstIndices consts_;
};

// ---- ScatterND ------------------------------------------------------------------------------

class ScatterNDKernel final : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelInfo& info) : red_(parse_reduction(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    const Tensor& upd = ctx.required_input(2);
    const size_t k = nd_tuple_length(ctx, ind, x.shape(), 0);
    check_nd_updates(ctx, x, ind, k, upd);
    ONYX_CHECK(k <= size_t(gs::kMaxDims), "[{}] index tuples of {}: the CUDA kernel takes up to {}",
               ctx.label(), k, gs::kMaxDims);
    const int eb = elem_bytes(ctx, x.dtype());
    const GsType t = scatter_type(ctx, x.dtype(), red_);
    Tensor& y = copy_of_data(ctx, x);
    gs::NdDesc d;
    d.k = int(k);
    d.n_tuples = k ? ind.numel() / int64_t(k) : ind.numel();
    d.slice = dims_product(x.shape(), k, x.shape().size());
    if (d.n_tuples == 0 || d.slice == 0) return;
    auto xs = contiguous_strides(x.shape());
    // Plain writes move whole slices in the widest word that divides them.
    const int w = red_ == Reduction::None ? widest_word(eb, d.slice, {y.raw(), upd.raw()}) : eb;
    const int64_t f = w / eb;
    d.slice /= f;
    for (size_t q = 0; q < k; ++q) {
      d.dims[q] = x.shape()[q];
      d.strides[q] = xs[q] / f;
    }
    gs::launch_scatter_nd(t, w, red_, y.raw(), ind.data<int64_t>(), upd.raw(), d, stream_of(ctx));
    check_launch();
  }

 private:
  Reduction red_;
};

}  // namespace

void register_gather_scatter_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, int since, int until, KernelFactory f) {
    r.add({.op_type = op, .domain = "", .since = since, .until = until, .provider = kProvider,
           .type_input = 0, .types = device_movable_types(), .create = std::move(f)});
  };
  add("Gather", 1, INT_MAX, make_factory<GatherKernel>());
  add("GatherElements", 11, INT_MAX, make_factory<GatherElementsKernel>());
  add("ScatterElements", 11, INT_MAX, make_factory<ScatterElementsKernel>());
  add("Scatter", 9, 10, make_factory<ScatterElementsKernel>());
  add("ScatterND", 11, INT_MAX, make_factory<ScatterNDKernel>());
}

}  // namespace onyx::cuda
