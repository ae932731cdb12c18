// CUDA data-movement kernels: Transpose, Concat, Split, Slice, Pad, Expand, Tile (copies on
// the device, shapes and checks on the host as kernels/cpu/tensor_ops.cpp), and the views
// Reshape, Flatten, Squeeze, Unsqueeze, Identity (no copy, as kernels/cpu/shape_ops.cpp).
// Shape-like operands (Reshape's shape, Slice's starts, Pad's pads and value, Split's split,
// Expand's shape, Tile's repeats, Squeeze / Unsqueeze axes) are host inputs. Range stays on
// the CPU. Device code: data_movement.cu.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "graph/dispatch.h"
#include "graph/saturate_cast.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/data_movement_launch.h"
#include "kernels/movement_plan.h"
#include "kernels/shape_util.h"
#include "kernels/slice_plan.h"
#include "kernels/view_ops.h"

namespace onyx::cuda {
namespace {

void check_launch() { ONYX_CUDA_CHECK(cudaGetLastError()); }

/// Drops size-1 dims and merges neighbours contiguous in the source, so the copy's index math
/// runs over as few (and as long) dimensions as possible.
void coalesce(Shape& dims, std::vector<int64_t>& strides) {
  Shape d;
  std::vector<int64_t> s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!d.empty() && s.back() == strides[i] * dims[i]) {
      d.back() *= dims[i];
      s.back() = strides[i];
    } else {
      d.push_back(dims[i]);
      s.push_back(strides[i]);
    }
  }
  dims = std::move(d);
  strides = std::move(s);
}

bool aligned(const void* p, int64_t w) { return reinterpret_cast<uintptr_t>(p) % uint64_t(w) == 0; }

/// dst (contiguous, `dims`) = src (elements of `eb` bytes) read at element `strides`.
void strided_copy(KernelContext& ctx, const void* src, void* dst, int eb, Shape dims,
                  std::vector<int64_t> strides) {
  const int64_t n = shape_numel(dims);
  if (n == 0) return;
  cudaStream_t s = stream_of(ctx);
  coalesce(dims, strides);
  if (dims.empty() || (dims.size() == 1 && strides[0] == 1)) {  // one contiguous block
    ONYX_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * size_t(eb), cudaMemcpyDeviceToDevice, s));
    return;
  }
  // Contiguous innermost rows move as the widest word that divides the row, every other
  // stride and both pointers (an fp16 Slice of whole rows moves 16 bytes per access).
  const size_t r = dims.size();
  if (strides[r - 1] == 1) {
    for (int w = 16; w > eb; w /= 2) {
      bool ok = w % eb == 0 && (dims[r - 1] * eb) % w == 0 && aligned(src, w) && aligned(dst, w);
      for (size_t d = 0; ok && d + 1 < r; ++d) ok = (strides[d] * eb) % w == 0;
      if (!ok) continue;
      const int k = w / eb;
      dims[r - 1] /= k;
      for (size_t d = 0; d + 1 < r; ++d) strides[d] /= k;
      eb = w;
      break;
    }
  }
  ONYX_CHECK(r <= size_t(move::kMaxDims), "[{}] the copy needs {} dimensions; the CUDA kernel takes {}",
             ctx.label(), r, move::kMaxDims);
  move::StridedCopy c;
  c.rank = int(r);
  c.numel = shape_numel(dims);
  int64_t span = 0;  // largest |offset| read
  for (size_t d = 0; d < r; ++d) {
    c.dims[d] = dims[d];
    c.strides[d] = strides[d];
    span += (strides[d] < 0 ? -strides[d] : strides[d]) * (dims[d] - 1);
  }
  c.index32 = c.numel <= INT32_MAX && span <= INT32_MAX;
  move::launch_strided_copy(eb, src, dst, c, s);
  check_launch();
}

// ---- Transpose ------------------------------------------------------------------------------

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info)
      : perm_(info.node.attr_ints("perm")), reverse_(!info.node.has_attr("perm")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const int eb = elem_bytes(ctx, x.dtype());
    Shape out;
    const std::vector<int64_t> perm = transpose_perm(ctx.label(), perm_, reverse_, x.shape(), out);
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    auto xs = contiguous_strides(x.shape());
    Shape dims;
    std::vector<int64_t> strides;
    for (int64_t p : perm) {
      dims.push_back(x.shape()[static_cast<size_t>(p)]);
      strides.push_back(xs[static_cast<size_t>(p)]);
    }
    coalesce(dims, strides);
    const size_t n = dims.size();
    // The innermost source axis moves away from the end: tiles through shared memory keep
    // both the reads and the writes coalesced. Narrow tiles (an NCHW -> NHWC of 3 channels)
    // waste most of a tile's threads, so they take the strided copy.
    if (n >= 2 && strides[n - 2] == 1 && strides[n - 1] != 1 && dims[n - 2] >= 8 && dims[n - 1] >= 8) {
      move::Transpose2D t;
      t.batch_rank = int(n - 2);
      for (size_t d = 0; d + 2 < n; ++d) {
        t.batch_dims[d] = dims[d];
        t.batch_strides[d] = strides[d];
        t.batch *= dims[d];
      }
      t.A = dims[n - 2];
      t.B = dims[n - 1];
      t.sb = strides[n - 1];
      move::launch_transpose2d(eb, x.raw(), y.raw(), t, stream_of(ctx));
      check_launch();
      return;
    }
    strided_copy(ctx, x.raw(), y.raw(), eb, dims, strides);
  }

 private:
  std::vector<int64_t> perm_;
  bool reverse_;  // no perm attribute; an empty one given is a rank-0 input's perm
};

// ---- Expand, Tile ---------------------------------------------------------------------------

void expand_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const ExpandPlan p = plan_expand(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, x.dtype(), p.out);
  strided_copy(ctx, x.raw(), y.raw(), elem_bytes(ctx, x.dtype()), p.out, p.strides);
}

/// Tile reads its output as (repeat, dim) pairs per axis: stride 0 over the repeats.
void tile_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  Shape out, dims;
  const std::vector<int64_t> reps = tile_repeats(ctx, x.shape(), out);
  std::vector<int64_t> strides, xs = contiguous_strides(x.shape());
  for (size_t i = 0; i < reps.size(); ++i) {
    dims.insert(dims.end(), {reps[i], x.shape()[i]});
    strides.insert(strides.end(), {0, xs[i]});
  }
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  strided_copy(ctx, x.raw(), y.raw(), elem_bytes(ctx, x.dtype()), dims, strides);
}

// ---- Concat, Split --------------------------------------------------------------------------

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) : axis_(concat_axis_attr(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& first = ctx.required_input(0);
    const ConcatPlan p = plan_concat(ctx, axis_);
    const Shape& out = p.out;
    const size_t a = p.axis;
    const int64_t outer = p.outer, inner = p.inner;
    const int64_t eb = elem_bytes(ctx, first.dtype());
    Tensor& y = ctx.allocate_output(0, first.dtype(), out);
    if (y.numel() == 0) return;
    int64_t pitch = out[a] * inner * eb, col = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.required_input(i);
      int64_t bytes = t.shape()[a] * inner * eb;
      move::launch_copy_rows(t.raw(), bytes, static_cast<char*>(y.raw()) + col, pitch, outer, bytes,
                             stream_of(ctx));
      check_launch();
      col += bytes;
    }
  }

 private:
  int64_t axis_;
};

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info) : attrs_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const SplitPlan p = plan_split(ctx, attrs_, x.shape());
    const size_t a = p.axis;
    const int64_t dim = x.shape()[a], n = ctx.num_outputs(), outer = p.outer, inner = p.inner;
    const std::vector<int64_t>& sizes = p.sizes;
    const int64_t eb = elem_bytes(ctx, x.dtype());
    int64_t col = 0;
    for (int i = 0; i < n; ++i) {
      Shape s = x.shape();
      s[a] = sizes[static_cast<size_t>(i)];
      int64_t bytes = s[a] * inner * eb;
      if (ctx.output_wanted(i)) {
        Tensor& y = ctx.allocate_output(i, x.dtype(), s);
        if (y.numel() > 0) {
          move::launch_copy_rows(static_cast<const char*>(x.raw()) + col, dim * inner * eb, y.raw(),
                                 bytes, outer, bytes, stream_of(ctx));
          check_launch();
        }
      }
      col += bytes;
    }
  }

 private:
  SplitAttrs attrs_;
};

// ---- Slice ----------------------------------------------------------------------------------

void slice_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const SlicePlan p = plan_slice(ctx, x.shape());
  const Shape& out = p.shape;
  const int64_t base = p.base;
  const std::vector<int64_t>& strides = p.strides;
  const int eb = elem_bytes(ctx, x.dtype());
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  strided_copy(ctx, static_cast<const char*>(x.raw()) + base * eb, y.raw(), eb, out, strides);
}

// ---- Pad ------------------------------------------------------------------------------------

/// The launcher's PadMode, whose enumerators are the shared ones.
move::PadMode device_pad_mode(PadMode m) {
  static_assert(int(move::PadMode::Constant) == int(PadMode::Constant) &&
                int(move::PadMode::Reflect) == int(PadMode::Reflect) &&
                int(move::PadMode::Edge) == int(PadMode::Edge) &&
                int(move::PadMode::Wrap) == int(PadMode::Wrap));
  return static_cast<move::PadMode>(m);
}

class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) : mode_(device_pad_mode(parse_pad_mode(info))) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const int eb = elem_bytes(ctx, x.dtype());
    const PadPlan plan = plan_pad(ctx, x.shape(), mode_ == move::PadMode::Constant);
    const Shape& out = plan.out;
    const std::vector<int64_t>& before = plan.before;
    const std::vector<int64_t>& after = plan.after;
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    std::array<unsigned char, 16> value{};
    pad_value(ctx, x.dtype(), value.data());
    // Neighbouring unpadded axes merge (they read the source contiguously).
    auto xs = contiguous_strides(x.shape());
    move::PadDesc p;
    p.numel = y.numel();
    p.mode = mode_;
    std::vector<std::array<int64_t, 4>> axes_desc;  // out, in, stride, before
    for (size_t a = 0; a < out.size(); ++a) {
      const bool plain = before[a] == 0 && after[a] == 0;
      if (plain && out[a] == 1) continue;
      if (plain && !axes_desc.empty() && axes_desc.back()[3] == 0 &&
          axes_desc.back()[0] == axes_desc.back()[1]) {
        axes_desc.back()[0] *= out[a];
        axes_desc.back()[1] *= out[a];
        axes_desc.back()[2] = xs[a];
        continue;
      }
      axes_desc.push_back({out[a], x.shape()[a], xs[a], before[a]});
    }
    ONYX_CHECK(axes_desc.size() <= size_t(move::kMaxPadDims),
               "[{}] padding {} axes; the CUDA kernel takes {}", ctx.label(), axes_desc.size(),
               move::kMaxPadDims);
    p.rank = int(axes_desc.size());
    for (size_t d = 0; d < axes_desc.size(); ++d) {
      p.out_dims[d] = axes_desc[d][0];
      p.in_dims[d] = axes_desc[d][1];
      p.in_strides[d] = axes_desc[d][2];
      p.before[d] = axes_desc[d][3];
    }
    move::launch_pad(eb, x.raw(), y.raw(), p, value.data(), stream_of(ctx));
    check_launch();
  }

 private:
  /// Constant mode's fill as the data's bytes: input 2 (a host input), zero when absent; an
  /// old-opset value of another dtype converted (saturating) to the data's.
  void pad_value(const KernelContext& ctx, DataType dt, unsigned char* out) const {
    const Tensor* v = ctx.input(2);
    if (!v || v->numel() == 0) return;
    ONYX_CHECK(v->numel() == 1, "[{}] constant_value should be a scalar but has shape {}",
               ctx.label(), shape_str(v->shape()));
    if (v->dtype() == dt) {
      std::memcpy(out, v->raw(), dtype_size(dt));
      return;
    }
    double d = v->to_double_vector()[0];
    dispatch<NumericTypes>(dt, ctx.label(), [&]<typename U>() {
      U u = U(saturate_cast<acc_t<U>>(d));  // 1e30 or NaN on integer data
      std::memcpy(out, &u, sizeof(U));
    });
  }

  move::PadMode mode_;
};

// ---- views ----------------------------------------------------------------------------------

/// device_movable_types() plus float8, float4 and the sub-byte ints (one per byte).
std::vector<DataType> device_stored_types() {
  return device_movable_types() +
         std::vector<DataType>{DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ,
                               DataType::Float8E5M2,   DataType::Float8E5M2FNUZ,
                               DataType::Float8E8M0,   DataType::Float4E2M1,
                               DataType::UInt4,        DataType::Int4,
                               DataType::UInt2,        DataType::Int2};
}

}  // namespace

std::vector<DataType> device_movable_types() {
  std::vector<DataType> out;
  for (DataType t : all_types())
    if (t != DataType::String) out.push_back(t);
  out.insert(out.end(), {DataType::Complex64, DataType::Complex128});
  return out;
}

void register_data_movement_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, int since, std::vector<DataType> types, KernelFactory f,
                  std::vector<int> host_inputs = {}) {
    r.add({.op_type = op, .domain = "", .since = since, .provider = kProvider, .type_input = 0,
           .types = std::move(types), .create = std::move(f), .host_inputs = std::move(host_inputs)});
  };
  auto any = device_stored_types(), classic = device_movable_types();
  add("Transpose", 1, any, make_factory<TransposeKernel>());
  add("Expand", 8, classic, function_factory(expand_compute), {1});
  add("Tile", 6, classic, function_factory(tile_compute), {1});
  add("Concat", 1, classic, make_factory<ConcatKernel>());
  add("Split", 1, classic, make_factory<SplitKernel>(), {1});
  add("Slice", 1, classic, function_factory(slice_compute), {1, 2, 3, 4});
  add("Pad", 1, any, make_factory<PadKernel>(), {1, 2, 3});
  register_view_kernels(r, kProvider, any);
}

}  // namespace onyx::cuda
