// The device dispatch of the optimizer kernels: argument checks, then the implementation the
// tensors' device registered (optimizer_kernel_table.h).
#include "kernels/optimizer_kernels.h"

#include <array>
#include <initializer_list>
#include <utility>

#include "graph/error.h"
#include "kernels/optimizer_kernel_table.h"
#include "kernels/provider.h"

namespace onyx::optimizer_kernels {
namespace {

constexpr size_t kDeviceTypes = 2;  // DeviceType::CPU, DeviceType::CUDA

const Table* table_of(Device device) {
  static const std::array<Table, kDeviceTypes> tables = [] {
    std::array<Table, kDeviceTypes> t{};
    cpu::register_optimizer_kernels(t[static_cast<size_t>(DeviceType::CPU)]);
    // DeviceType::CUDA stays empty until kernels/cuda/ registers its optimizer kernels here.
    return t;
  }();
  const auto i = static_cast<size_t>(device.type);
  return i < kDeviceTypes ? &tables[i] : nullptr;
}

/// The implementation `fn` for tensors on `device`, or the "no optimizer kernels" error.
template <typename Fn>
Fn impl(Fn Table::*fn, Device device, std::string_view who) {
  const Table* t = table_of(device);
  Fn f = t ? t->*fn : nullptr;
  ONYX_CHECK(f != nullptr,
             "[optimizer] {}: buffers on {}: this build has no optimizer kernels for that device",
             who, device.str());
  return f;
}

using Arg = std::pair<const Tensor*, const char*>;  // a tensor argument and its role

/// Checks that every tensor is float32 (an undefined tensor is an empty buffer) and that all are
/// on one device, which it returns.
Device check_tensors(std::string_view who, std::initializer_list<Arg> args) {
  const Device d = args.begin()->first->device();
  for (const auto& [t, role] : args) {
    ONYX_CHECK(t->dtype() == DataType::Float || !t->defined(),
               "[optimizer] {}: {} should be a float32 tensor but is {} {}", who, role,
               dtype_name(t->dtype()), shape_str(t->shape()));
    ONYX_CHECK(t->device() == d, "[optimizer] {}: {} is on {} but {} is on {}", who, role,
               t->device().str(), args.begin()->second, d.str());
  }
  return d;
}

/// The fused updates: buffers cover the plan's span, per-segment arrays have plan.segments.
void check_plan(std::string_view who, const PiecePlan& plan, std::initializer_list<Arg> buffers,
                std::initializer_list<std::pair<size_t, const char*>> per_segment) {
  for (const auto& [t, role] : buffers)
    ONYX_CHECK(t->numel() >= plan.span,
               "[optimizer] {}: {} should have at least {} elements (the parameter span) but has "
               "{}",
               who, role, plan.span, t->numel());
  for (const auto& [size, role] : per_segment)
    ONYX_CHECK(size >= static_cast<size_t>(plan.segments),
               "[optimizer] {}: {} should have one entry per segment ({}) but has {}", who, role,
               plan.segments, size);
}

void check_same_size(std::string_view who, const Tensor& a, const char* ra, const Tensor& b,
                     const char* rb) {
  ONYX_CHECK(a.numel() == b.numel(), "[optimizer] {}: {} has {} elements but {} has {}", who, ra,
             a.numel(), rb, b.numel());
}

/// params_low, where given: a 16-bit float buffer covering the plan on params' device.
void check_low_copy(std::string_view who, const PiecePlan& plan, const Tensor& params,
                    const Tensor* low) {
  if (!low) return;
  ONYX_CHECK(low->dtype() == DataType::BFloat16 || low->dtype() == DataType::Float16,
             "[optimizer] {}: params_low should be a bfloat16 or float16 tensor but is {} {}", who,
             dtype_name(low->dtype()), shape_str(low->shape()));
  ONYX_CHECK(low->device() == params.device(), "[optimizer] {}: params_low is on {} but params on {}",
             who, low->device().str(), params.device().str());
  ONYX_CHECK(low->numel() >= plan.span,
             "[optimizer] {}: params_low should have at least {} elements (the parameter span) but "
             "has {}",
             who, plan.span, low->numel());
}

const char* provider_of(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

}  // namespace

void sgd(const PiecePlan& plan, std::span<const SgdCoeffs> coeffs, Tensor& params,
         const Tensor& grads, Tensor* momentum, int threads, Tensor* params_low) {
  const char* who = "sgd";
  const Device d = momentum ? check_tensors(who, {{&params, "params"},
                                                  {&grads, "grads"},
                                                  {momentum, "momentum"}})
                            : check_tensors(who, {{&params, "params"}, {&grads, "grads"}});
  check_plan(who, plan, {{&params, "params"}, {&grads, "grads"}}, {{coeffs.size(), "coeffs"}});
  if (momentum) check_plan(who, plan, {{momentum, "momentum"}}, {});
  check_low_copy(who, plan, params, params_low);
  impl(&Table::sgd, d, who)(plan, coeffs, params, grads, momentum, threads, params_low);
}

void adam(const PiecePlan& plan, std::span<const AdamCoeffs> coeffs, Tensor& params,
          const Tensor& grads, Tensor& m, Tensor& v, int threads, Tensor* params_low) {
  const char* who = "adam";
  const Device d =
      check_tensors(who, {{&params, "params"}, {&grads, "grads"}, {&m, "m"}, {&v, "v"}});
  check_plan(who, plan, {{&params, "params"}, {&grads, "grads"}, {&m, "m"}, {&v, "v"}},
             {{coeffs.size(), "coeffs"}});
  check_low_copy(who, plan, params, params_low);
  impl(&Table::adam, d, who)(plan, coeffs, params, grads, m, v, threads, params_low);
}

void lamb_moments(const PiecePlan& plan, std::span<const LambCoeffs> coeffs, const Tensor& params,
                  const Tensor& grads, Tensor& m, Tensor& v, std::span<double> param_sq,
                  std::span<double> dir_sq, int threads) {
  const char* who = "lamb";
  const Device d =
      check_tensors(who, {{&params, "params"}, {&grads, "grads"}, {&m, "m"}, {&v, "v"}});
  check_plan(who, plan, {{&params, "params"}, {&grads, "grads"}, {&m, "m"}, {&v, "v"}},
             {{coeffs.size(), "coeffs"}, {param_sq.size(), "param_sq"}, {dir_sq.size(), "dir_sq"}});
  impl(&Table::lamb_moments, d, who)(plan, coeffs, params, grads, m, v, param_sq, dir_sq, threads);
}

void lamb_apply(const PiecePlan& plan, std::span<const LambCoeffs> coeffs,
                std::span<const float> scale, Tensor& params, const Tensor& m, const Tensor& v,
                int threads, Tensor* params_low) {
  const char* who = "lamb";
  const Device d = check_tensors(who, {{&params, "params"}, {&m, "m"}, {&v, "v"}});
  check_plan(who, plan, {{&params, "params"}, {&m, "m"}, {&v, "v"}},
             {{coeffs.size(), "coeffs"}, {scale.size(), "scale"}});
  check_low_copy(who, plan, params, params_low);
  impl(&Table::lamb_apply, d, who)(plan, coeffs, scale, params, m, v, threads, params_low);
}

double sum_squares(const Tensor& g, int threads) {
  const Device d = check_tensors("sum_squares", {{&g, "the gradient"}});
  return impl(&Table::sum_squares, d, "sum_squares")(g, threads);
}

double copy_sum_squares(Tensor& dst, const Tensor& src, int threads) {
  const char* who = "copy_sum_squares";
  const Device d = check_tensors(who, {{&dst, "dst"}, {&src, "src"}});
  check_same_size(who, dst, "dst", src, "src");
  return impl(&Table::copy_sum_squares, d, who)(dst, src, threads);
}

bool all_finite(const Tensor& g, int threads) {
  const Device d = check_tensors("all_finite", {{&g, "the gradient"}});
  return impl(&Table::all_finite, d, "all_finite")(g, threads);
}

void scale(Tensor& g, float s, int threads) {
  const Device d = check_tensors("scale", {{&g, "the gradient"}});
  impl(&Table::scale, d, "scale")(g, s, threads);
}

bool unscale(Tensor& g, float s, int threads) {
  const Device d = check_tensors("unscale", {{&g, "the gradient"}});
  return impl(&Table::unscale, d, "unscale")(g, s, threads);
}

void accumulate(Tensor& acc, const Tensor& g, int threads) {
  const char* who = "accumulate";
  const Device d = check_tensors(who, {{&acc, "acc"}, {&g, "g"}});
  check_same_size(who, acc, "acc", g, "g");
  impl(&Table::accumulate, d, who)(acc, g, threads);
}

void to_low_precision(const Tensor& params, Tensor& low, int threads) {
  const char* who = "to_low_precision";
  const Device d = check_tensors(who, {{&params, "params"}});
  check_same_size(who, params, "params", low, "low");
  check_low_copy(who, PiecePlan{.span = params.numel()}, params, &low);
  impl(&Table::to_low_precision, d, who)(params, low, threads);
}

bool has_kernels(Device device) {
  const Table* t = table_of(device);
  return t && t->sgd;
}

void check_device(Device device, std::string_view who) {
  ONYX_CHECK(has_kernels(device),
             "[optimizer] {}: buffers on {}: this build has no optimizer kernels for that device",
             who, device.str());
}

Tensor copy_to(const Tensor& src, Device device) {
  if (src.device().type == DeviceType::CPU && device.type == DeviceType::CPU) return src.clone();
  // The provider on the device end does the copy (host <-> device, or within the device).
  const Device end = device.type != DeviceType::CPU ? device : src.device();
  std::shared_ptr<ExecutionProvider> ep = make_provider(provider_of(end.type), end.index);
  Tensor dst = Tensor::empty(src.dtype(), src.shape(),
                             device.type == DeviceType::CPU ? nullptr : ep->allocator());
  ep->copy(src, dst);
  return dst;
}

}  // namespace onyx::optimizer_kernels
