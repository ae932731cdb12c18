// BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization and
// RMSNormalization on CUDA, mirroring kernels/cpu/normalization.cpp (opsets, attributes,
// training-mode BatchNormalization, per-group GroupNormalization-18 parameters, messages), and
// com.microsoft SkipLayerNormalization (ONNX Runtime's contrib op; the CPU has no kernel for
// it, so such a node needs the CUDA provider). Parameters may be any float dtype, read on the
// device as their own dtype.
#include <algorithm>
#include <climits>
#include <optional>

#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/normalization_launch.h"
#include "kernels/norm_attrs.h"

namespace onyx::cuda {
namespace {

std::optional<norm::DType> norm_dtype(DataType t) {
  switch (t) {
    case DataType::Float: return norm::DType::F32;
    case DataType::Double: return norm::DType::F64;
    case DataType::Float16: return norm::DType::F16;
    case DataType::BFloat16: return norm::DType::BF16;
    default: return std::nullopt;
  }
}

bool wanted(const KernelContext& ctx, int i) { return ctx.num_outputs() > i && ctx.output_wanted(i); }

/// X's dtype for the device code; onyx::Error naming the node otherwise.
norm::DType x_dtype(const KernelContext& ctx, const Tensor& x) {
  const auto dt = norm_dtype(x.dtype());
  ONYX_CHECK(dt, "[{}] X must be a float tensor, got {}", ctx.label(), dtype_name(x.dtype()));
  return *dt;
}

/// A parameter's dtype, which must be a float type.
norm::DType param_dtype(const KernelContext& ctx, const Tensor& p, const char* name) {
  const auto dt = norm_dtype(p.dtype());
  ONYX_CHECK(dt, "[{}] {} must be a float tensor, got {}", ctx.label(), name, dtype_name(p.dtype()));
  return *dt;
}

/// p broadcast (numpy rules, right-aligned) to `target`: p itself when it already holds that
/// many values (as the CPU kernel takes it), else a copy expanded into `holder`.
const void* expand_param(KernelContext& ctx, const Tensor& p, const Shape& target, const char* name, Tensor& holder) {
  const int64_t n = shape_numel(target);
  if (p.numel() == n) return p.raw();
  const Shape& ps = p.shape();
  ONYX_CHECK(ps.size() <= target.size(), "[{}] {} of shape {} does not broadcast to {}", ctx.label(), name,
             shape_str(ps), shape_str(target));
  const size_t off = target.size() - ps.size();
  for (size_t i = 0; i < ps.size(); ++i)
    ONYX_CHECK(ps[i] == 1 || ps[i] == target[off + i], "[{}] {} of shape {} does not broadcast to {}", ctx.label(),
               name, shape_str(ps), shape_str(target));
  // Drop size-1 target axes (they change no offsets), keep the rest with p's strides.
  norm::Expand e;
  int64_t stride = 1;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), innermost first
  for (int64_t d = static_cast<int64_t>(target.size()) - 1; d >= 0; --d) {
    const int64_t pd = d - static_cast<int64_t>(off);
    const int64_t psize = pd >= 0 ? ps[pd] : 1;
    if (target[d] != 1) dims.emplace_back(target[d], psize == 1 ? 0 : stride);
    stride *= psize;
  }
  ONYX_CHECK(static_cast<int>(dims.size()) <= norm::kMaxDims,
             "[{}] {} of shape {} broadcasts over more than {} axes, more than the CUDA kernel takes", ctx.label(),
             name, shape_str(ps), norm::kMaxDims);
  e.ndims = static_cast<int>(dims.size());
  for (int i = 0; i < e.ndims; ++i) e.dims[i] = dims[e.ndims - 1 - i].first, e.strides[i] = dims[e.ndims - 1 - i].second;
  holder = ctx.scratch(p.dtype(), target);
  if (n > 0) {
    norm::launch_expand(p.raw(), holder.raw(), static_cast<int>(dtype_size(p.dtype())), n, e, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }
  return holder.raw();
}

/// LayerNormalization and RMSNormalization: each row of X.shape[axis:] is normalised.
class RowNormKernel final : public Kernel {
 public:
  RowNormKernel(const KernelInfo& info, bool rms) : attrs_(info, rms) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& scale_t = ctx.required_input(1);
    const Tensor* bias_t = attrs_.rms ? nullptr : opt_input(ctx, 2);
    const int64_t r = X.rank();
    const int64_t axis = attrs_.axis_of(ctx, X);
    const norm::DType dt = x_dtype(ctx, X);
    const Shape inner_shape(X.shape().begin() + std::min(axis, r), X.shape().end());
    const int64_t inner = shape_numel(inner_shape), outer = inner ? X.numel() / inner : 0;
    Tensor scale_hold, bias_hold;
    norm::RowNorm a;
    a.scale_t = param_dtype(ctx, scale_t, "scale");
    a.scale = expand_param(ctx, scale_t, inner_shape, "scale", scale_hold);
    if (bias_t) {
      a.shift_t = param_dtype(ctx, *bias_t, "B");
      a.shift = expand_param(ctx, *bias_t, inner_shape, "B", bias_hold);
    }
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    Shape stat_shape(X.shape().begin(), X.shape().begin() + std::min(axis, r));
    stat_shape.resize(r, 1);
    const DataType sdt = norm_dtype(attrs_.stash) ? attrs_.stash : DataType::Float;
    a.stat_t = *norm_dtype(sdt);
    if (!attrs_.rms && wanted(ctx, 1)) a.mean_out = ctx.allocate_output(1, sdt, stat_shape).raw();
    if (!attrs_.rms && wanted(ctx, 2)) a.inv_out = ctx.allocate_output(2, sdt, stat_shape).raw();
    if (outer == 0 || inner == 0) return;
    a.x = X.raw(), a.y = Y.raw(), a.rows = outer, a.cols = inner, a.epsilon = attrs_.epsilon, a.rms = attrs_.rms;
    norm::launch_row_norm(dt, a, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  RowNormAttrs attrs_;
};

/// com.microsoft SkipLayerNormalization: LayerNorm over the last axis of
/// input + skip (+ bias); outputs output, mean?, inv_std_var? (float, [..., 1]) and
/// input_skip_bias_sum?. skip is like input, or its trailing [S, H] / [1, S, H].
class SkipLayerNormKernel final : public Kernel {
 public:
  explicit SkipLayerNormKernel(const KernelInfo& info) : eps_(info.node.attr_float("epsilon", 1e-12f)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& skip = ctx.required_input(1);
    const Tensor& gamma = ctx.required_input(2);
    const Tensor* beta = opt_input(ctx, 3);
    const Tensor* bias = opt_input(ctx, 4);
    const norm::DType dt = x_dtype(ctx, x);
    ONYX_CHECK(x.rank() == 2 || x.rank() == 3, "[{}] input should be 2-D or 3-D but has shape {}", ctx.label(),
               shape_str(x.shape()));
    const int64_t H = x.dim(-1);
    bool skip_ok = skip.dtype() == x.dtype() && skip.rank() >= 1 && skip.rank() <= x.rank();
    for (int64_t i = 1; skip_ok && i <= skip.rank(); ++i)
      skip_ok = skip.dim(-i) == x.dim(-i) || (i > 2 && skip.dim(-i) == 1);
    ONYX_CHECK(skip_ok, "[{}] skip should be {} with shape {} or its trailing [S, H] but is {} {}", ctx.label(),
               dtype_name(x.dtype()), shape_str(x.shape()), dtype_name(skip.dtype()), shape_str(skip.shape()));
    for (auto [t, name] : {std::pair{&gamma, "gamma"}, std::pair{beta, "beta"}, std::pair{bias, "bias"}}) {
      if (!t) continue;
      ONYX_CHECK(t->dtype() == x.dtype() && t->rank() == 1 && t->dim(0) == H,
                 "[{}] {} should be {} of shape [{}] but is {} {}", ctx.label(), name, dtype_name(x.dtype()), H,
                 dtype_name(t->dtype()), shape_str(t->shape()));
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    Shape stat_shape = x.shape();
    stat_shape.back() = 1;
    norm::RowNorm a;
    if (wanted(ctx, 1)) a.mean_out = ctx.allocate_output(1, DataType::Float, stat_shape).raw();
    if (wanted(ctx, 2)) a.inv_out = ctx.allocate_output(2, DataType::Float, stat_shape).raw();
    if (wanted(ctx, 3)) a.sum_out = ctx.allocate_output(3, x.dtype(), x.shape()).raw();
    if (x.numel() == 0) return;
    a.x = x.raw(), a.y = y.raw(), a.rows = x.numel() / H, a.cols = H;
    a.skip = skip.raw(), a.skip_rows = skip.numel() / H;
    a.bias_add = bias ? bias->raw() : nullptr;
    a.scale = gamma.raw(), a.shift = beta ? beta->raw() : nullptr, a.scale_t = a.shift_t = dt;
    a.stat_t = norm::DType::F32, a.epsilon = eps_;
    norm::launch_row_norm(dt, a, stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  double eps_;
};

/// A per-channel parameter of C values (or C * inner for BatchNormalization spatial=0).
norm::DType channel_param(KernelContext& ctx, const Tensor& p, int64_t C, int64_t inner, const char* name) {
  const norm::DType dt = param_dtype(ctx, p, name);
  ONYX_CHECK(p.numel() == C || p.numel() == C * inner, "[{}] {} must hold {} values (one per channel), got shape {}",
             ctx.label(), name, C, shape_str(p.shape()));
  return dt;
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info)
      : eps_(info.node.attr_float("epsilon", 1e-5f)),
        momentum_(info.node.attr_float("momentum", 0.9f)),
        training_attr_(info.node.attr_int("training_mode", 0) != 0),
        opset_(info.opset) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    ONYX_CHECK(X.rank() >= 1 && norm_dtype(X.dtype()), "[{}] X must be a float tensor of rank >= 1, got {} {}",
               ctx.label(), dtype_name(X.dtype()), shape_str(X.shape()));
    const norm::DType dt = *norm_dtype(X.dtype());
    norm::BatchNorm a;
    a.N = X.dim(0), a.C = X.rank() > 1 ? X.dim(1) : 1;
    a.S = X.numel() / std::max<int64_t>(a.N * a.C, 1);
    const Tensor& scale = ctx.required_input(1);
    const Tensor& bias = ctx.required_input(2);
    const Tensor& mean = ctx.required_input(3);
    const Tensor& var = ctx.required_input(4);
    a.scale_t = channel_param(ctx, scale, a.C, a.S, "scale");
    a.bias_t = channel_param(ctx, bias, a.C, a.S, "B");
    a.mean_t = channel_param(ctx, mean, a.C, a.S, "input_mean");
    a.var_t = channel_param(ctx, var, a.C, a.S, "input_var");
    a.scale = scale.raw(), a.bias = bias.raw(), a.mean = mean.raw(), a.var = var.raw();
    a.scale_n = scale.numel(), a.bias_n = bias.numel(), a.mean_n = mean.numel(), a.var_n = var.numel();
    // Older opsets train when the statistics outputs are asked for.
    a.training = opset_ >= 14 ? training_attr_ : ctx.num_outputs() > 1 && ctx.output_wanted(1);
    const bool per_elem = a.scale_n == a.C * a.S && a.S > 1;
    ONYX_CHECK(!a.training || !per_elem, "[{}] training with per-element statistics is not supported", ctx.label());
    a.epsilon = eps_, a.momentum = momentum_;
    if (a.training) {
      void** outs[] = {&a.out_running_mean, &a.out_running_var, &a.out_saved_mean, &a.out_saved_var};
      for (int o = 1; o <= 4 && o < ctx.num_outputs(); ++o) {
        if (!ctx.output_wanted(o)) continue;
        const Tensor& like = o == 2 || o == 4 ? var : mean;
        *outs[o - 1] = ctx.allocate_output(o, like.dtype(), {a.C}).raw();
      }
    }
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    a.x = X.raw(), a.y = Y.raw();
    if (a.C == 0) return;
    const size_t bytes = norm::batch_norm_scratch_bytes(dt, a);
    Tensor scratch = ctx.scratch(DataType::UInt8, {static_cast<int64_t>(bytes)});
    norm::launch_batch_norm(dt, a, scratch.raw(), stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  double eps_, momentum_;
  bool training_attr_;
  int64_t opset_;
};

/// GroupNormalization (and InstanceNormalization as one group per channel).
class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(const KernelInfo& info, bool instance)
      : eps_(info.node.attr_float("epsilon", 1e-5f)),
        groups_(instance ? 0 : info.node.require_attr("num_groups", Attribute::Type::Int).i),
        instance_(instance) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    ONYX_CHECK(X.rank() >= 2 && norm_dtype(X.dtype()), "[{}] X must be a float tensor [N, C, ...], got {} {}",
               ctx.label(), dtype_name(X.dtype()), shape_str(X.shape()));
    norm::GroupNorm a;
    a.N = X.dim(0), a.C = X.dim(1), a.S = X.numel() / std::max<int64_t>(a.N * a.C, 1);
    a.groups = instance_ ? a.C : groups_;
    ONYX_CHECK(a.groups >= 1 && a.C % a.groups == 0, "[{}] num_groups {} does not divide the {} channels", ctx.label(),
               a.groups, a.C);
    const Tensor& st = ctx.required_input(1);
    const Tensor& bt = ctx.required_input(2);
    // Scale and bias hold one value per channel, or per group (GroupNormalization-18).
    for (const Tensor* p : {&st, &bt})
      ONYX_CHECK(p->numel() == a.C || (!instance_ && p->numel() == a.groups),
                 "[{}] scale and bias must hold {} values (one per channel), got shape {}", ctx.label(), a.C,
                 shape_str(p->shape()));
    ONYX_CHECK(st.numel() == bt.numel(), "[{}] scale {} and bias {} should hold as many values", ctx.label(),
               shape_str(st.shape()), shape_str(bt.shape()));
    a.scale_t = param_dtype(ctx, st, "scale"), a.bias_t = param_dtype(ctx, bt, "bias");
    a.scale = st.raw(), a.bias = bt.raw(), a.per_group = st.numel() != a.C, a.epsilon = eps_;
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    if (Y.numel() == 0) return;
    a.x = X.raw(), a.y = Y.raw();
    const norm::DType dt = *norm_dtype(X.dtype());
    const size_t bytes = norm::group_norm_scratch_bytes(dt, a);
    Tensor scratch = ctx.scratch(DataType::UInt8, {static_cast<int64_t>(bytes)});
    norm::launch_group_norm(dt, a, scratch.raw(), stream_of(ctx));
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  double eps_;
  int64_t groups_;
  bool instance_;
};

template <typename K, bool kFlag>
KernelFactory flag_factory() {
  return [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<K>(i, kFlag); };
}

}  // namespace

void register_normalization_kernels(KernelRegistry& r) {
  auto add = [&](const char* op, const char* domain, int since, KernelFactory f) {
    r.add({.op_type = op,
           .domain = domain,
           .since = since,
           .until = INT_MAX,
           .provider = kProvider,
           .type_input = 0,
           .types = float_types(),
           .create = std::move(f)});
  };
  add("BatchNormalization", "", 1, make_factory<BatchNormKernel>());
  add("InstanceNormalization", "", 1, flag_factory<GroupNormKernel, true>());
  add("GroupNormalization", "", 18, flag_factory<GroupNormKernel, false>());
  add("LayerNormalization", "", 17, flag_factory<RowNormKernel, false>());
  add("RMSNormalization", "", 23, flag_factory<RowNormKernel, true>());
  add("SkipLayerNormalization", "com.microsoft", 1, make_factory<SkipLayerNormKernel>());
}

}  // namespace onyx::cuda
