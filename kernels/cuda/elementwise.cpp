// CUDA elementwise kernels: unary activations and math, Gelu / FastGelu, IsNaN / IsInf, Clip,
// binary arithmetic / comparison / logic with numpy broadcasting (and the opset < 7 legacy
// form), Pow, variadic Min / Max / Sum / Mean, PRelu and Where. Shapes, attributes and checks
// mirror kernels/cpu/elementwise_{unary,binary}.cpp; the device code is elementwise.cu.
#include <algorithm>
#include <array>
#include <optional>

#include "kernels/cuda/cuda_common.h"
#include "kernels/shape_util.h"
#include "kernels/cuda/elementwise_launch.h"
#include "kernels/elementwise_checks.h"

namespace onyx::cuda {
namespace {

using ew::BinaryOp;
using ew::DType;
using ew::UnaryOp;

constexpr std::array<std::pair<DataType, DType>, int(DType::kCount)> kTypes = {{
    {DataType::Float, DType::F32},       {DataType::Double, DType::F64},
    {DataType::Float16, DType::F16},     {DataType::BFloat16, DType::BF16},
    {DataType::Int8, DType::I8},         {DataType::Int16, DType::I16},
    {DataType::Int32, DType::I32},       {DataType::Int64, DType::I64},
    {DataType::UInt8, DType::U8},        {DataType::UInt16, DType::U16},
    {DataType::UInt32, DType::U32},      {DataType::UInt64, DType::U64},
    {DataType::Bool, DType::Bool},       {DataType::Float8E4M3FN, DType::F8E4M3FN},
    {DataType::Float8E4M3FNUZ, DType::F8E4M3FNUZ}, {DataType::Float8E5M2, DType::F8E5M2},
    {DataType::Float8E5M2FNUZ, DType::F8E5M2FNUZ},
}};

std::optional<DType> to_ew(DataType t) {
  for (auto [d, e] : kTypes)
    if (d == t) return e;
  return std::nullopt;
}

/// The onyx dtypes whose device type satisfies `pred`: a registration's type list.
template <typename Pred>
std::vector<DataType> types_where(Pred pred) {
  std::vector<DataType> out;
  for (auto [d, e] : kTypes)
    if (pred(e)) out.push_back(d);
  return out;
}

DType ew_type(const KernelContext& ctx, DataType t, bool ok_for_op) {
  std::optional<DType> e = to_ew(t);
  ONYX_CHECK(e && ok_for_op, "[{}] dtype {} is not supported by the CUDA kernel", ctx.label(),
             dtype_name(t));
  return *e;
}

void check_launch() { ONYX_CUDA_CHECK(cudaGetLastError()); }

// ---- broadcasting ---------------------------------------------------------------------------

/// The device descriptor of reading `ins` (at most 3) broadcast to `out`: size-1 output
/// dimensions dropped, neighbours merged where every input is contiguous across them.
ew::Broadcast make_broadcast(const std::string& who, const Shape& out, const std::vector<Shape>& ins) {
  const size_t rank = out.size(), n_in = ins.size();
  ew::Broadcast bc;
  bc.numel = shape_numel(out);
  std::vector<std::vector<int64_t>> full(n_in, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n_in; ++k) {
    const Shape& s = ins[k];
    bc.max_input_numel = std::max(bc.max_input_numel, shape_numel(s));
    int64_t stride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      full[k][rank - s.size() + i] = s[i] == 1 ? 0 : stride;
      stride *= s[i];
    }
  }
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, 3>> strides;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; merge && k < n_in; ++k) merge = strides.back()[k] == full[k][d] * out[d];
    if (merge) {
      dims.back() *= out[d];
      for (size_t k = 0; k < n_in; ++k) strides.back()[k] = full[k][d];
    } else {
      dims.push_back(out[d]);
      strides.push_back({});
      for (size_t k = 0; k < n_in; ++k) strides.back()[k] = full[k][d];
    }
  }
  ONYX_CHECK(dims.size() <= size_t(ew::kMaxDims),
             "[{}] broadcasting to {} needs {} dimensions after merging; the CUDA kernels take {}",
             who, shape_str(out), dims.size(), ew::kMaxDims);
  bc.rank = int(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    bc.dims[d] = dims[d];
    for (size_t k = 0; k < n_in; ++k) bc.strides[k][d] = strides[d][k];
  }
  return bc;
}

void check_same_dtype(const KernelContext& ctx, const std::vector<const Tensor*>& ins, int first = 0) {
  for (size_t k = 1; k < ins.size(); ++k)
    ONYX_CHECK(ins[k]->dtype() == ins[0]->dtype(),
               "[{}] input {} has dtype {} but input {} has dtype {}; they must match", ctx.label(),
               first + int(k), dtype_name(ins[k]->dtype()), first, dtype_name(ins[0]->dtype()));
}

// ---- unary ----------------------------------------------------------------------------------

/// The unary op's attributes (defaults as the CPU functors).
ew::UnaryParams unary_params(const KernelInfo& info, UnaryOp op) {
  auto f = [&](const char* n, float def) { return info.node.attr_float(n, def); };
  switch (op) {
    case UnaryOp::LeakyRelu: return {f("alpha", 0.01f), 0};
    case UnaryOp::Elu:
    case UnaryOp::Celu:
    case UnaryOp::ThresholdedRelu: return {f("alpha", 1.0f), 0};
    case UnaryOp::Selu:
      return {f("alpha", 1.67326319217681884765625f), f("gamma", 1.05070102214813232421875f)};
    case UnaryOp::HardSigmoid: return {f("alpha", 0.2f), f("beta", 0.5f)};
    case UnaryOp::Shrink: return {f("bias", 0), f("lambd", 0.5f)};
    default: return {};
  }
}

/// Gelu's approximate attribute: "none" (erf) or "tanh".
UnaryOp gelu_op(const KernelInfo& info) {
  std::string a = info.node.attr_string("approximate", "none");
  ONYX_CHECK(a == "none" || a == "tanh",
             "[{}] attribute approximate must be 'none' or 'tanh', found '{}'", info.label(), a);
  return a == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf;
}

void run_unary(KernelContext& ctx, UnaryOp op, const ew::UnaryParams& p) {
  const Tensor& x = ctx.required_input(0);
  DType t = ew_type(ctx, x.dtype(), to_ew(x.dtype()) && ew::unary_supports(op, *to_ew(x.dtype())));
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.numel() == 0) return;
  ew::launch_unary(op, t, x.raw(), y.raw(), x.numel(), p, stream_of(ctx));
  check_launch();
}

class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const KernelInfo& info, UnaryOp op)
      : op_(op == UnaryOp::GeluErf ? gelu_op(info) : op), p_(unary_params(info, op)) {}
  void compute(KernelContext& ctx) const override { run_unary(ctx, op_, p_); }

 private:
  UnaryOp op_;
  ew::UnaryParams p_;
};

/// com.microsoft FastGelu(X, bias?) = Gelu_tanh(X + bias), bias [N] over X's last axis.
void fast_gelu_compute(KernelContext& ctx) {
  const Tensor* bias = ctx.input(1);
  if (!bias || !bias->defined()) return run_unary(ctx, UnaryOp::GeluTanh, {});
  const Tensor& x = ctx.required_input(0);
  check_fast_gelu_bias(ctx, x, *bias);
  DType t = ew_type(ctx, x.dtype(), is_float(x.dtype()));
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.numel() == 0) return;
  ew::launch_binary(BinaryOp::AddGeluTanh, t, x.raw(), bias->raw(), y.raw(),
                    make_broadcast(ctx.label(), x.shape(), {x.shape(), bias->shape()}), {},
                    stream_of(ctx));
  check_launch();
}

/// IsNaN and IsInf (detect_positive / detect_negative): float or float8 in, bool out.
class FloatClassKernel final : public Kernel {
 public:
  explicit FloatClassKernel(const KernelInfo& info)
      : nan_(info.node.op_type == "IsNaN"),
        pos_(info.node.attr_int("detect_positive", 1) != 0),
        neg_(info.node.attr_int("detect_negative", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    DType t = ew_type(ctx, x.dtype(), is_float(x.dtype()) || is_float8(x.dtype()));
    Tensor& y = ctx.allocate_output(0, DataType::Bool, x.shape());
    if (x.numel() == 0) return;
    ew::launch_float_class(t, x.raw(), y.data<bool>(), x.numel(), nan_, pos_, neg_, stream_of(ctx));
    check_launch();
  }

 private:
  bool nan_, pos_, neg_;
};

/// Clip with optional scalar min (input 1) and max (input 2), both host inputs; min applies
/// first, so min > max gives max everywhere, as numpy.clip does.
void clip_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const Tensor* lo = ctx.input(1);
  const Tensor* hi = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
  check_clip_bounds(ctx, x, lo, hi);
  DType t = ew_type(ctx, x.dtype(), is_float(x.dtype()) || is_signed_int(x.dtype()) ||
                                        is_unsigned_int(x.dtype()));
  Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
  if (x.numel() == 0) return;
  ew::launch_clip(t, x.raw(), y.raw(), x.numel(), lo ? lo->raw() : nullptr,
                  hi ? hi->raw() : nullptr, stream_of(ctx));
  check_launch();
}

// ---- binary ---------------------------------------------------------------------------------

ew::BinaryParams binary_params(const KernelInfo& info, BinaryOp op) {
  ew::BinaryParams p;
  if (op == BinaryOp::Mod) p.fmod = info.node.attr_int("fmod", 0) != 0;
  if (op == BinaryOp::BitShift) {
    p.shift_left = parse_shift_left(info);
  }
  return p;
}

/// y = op(a, b) broadcast into `y` (allocated with the broadcast shape).
void launch_binary(KernelContext& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y,
                   const ew::BinaryParams& p) {
  DType t = ew_type(ctx, a.dtype(), to_ew(a.dtype()) && ew::binary_supports(op, *to_ew(a.dtype())));
  ew::launch_binary(op, t, a.raw(), b.raw(), y.raw(),
                    make_broadcast(ctx.label(), y.shape(), {a.shape(), b.shape()}), p,
                    stream_of(ctx));
  check_launch();
}

/// out = op(a, b) with numpy broadcasting; bool out for comparisons and logic. PRelu
/// additionally requires the slope to broadcast to X's shape.
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(const KernelInfo& info, BinaryOp op)
      : op_(op), p_(binary_params(info, op)), legacy_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.required_input(0);
    Tensor b = legacy_.apply(ctx, a, ctx.required_input(1));
    check_same_dtype(ctx, {&a, &b});
    Shape shape = broadcast_shapes(ctx.label(), {a.shape(), b.shape()});
    if (op_ == BinaryOp::PRelu)
      ONYX_CHECK(shape == a.shape(), "[{}] slope of shape {} does not broadcast to X of shape {}",
                 ctx.label(), shape_str(b.shape()), shape_str(a.shape()));
    Tensor& y = ctx.allocate_output(0, ew::binary_bool_out(op_) ? DataType::Bool : a.dtype(), shape);
    if (y.numel() == 0) return;
    launch_binary(ctx, op_, a, b, y, p_);
  }

 private:
  BinaryOp op_;
  ew::BinaryParams p_;
  LegacyBroadcast legacy_;
};

/// Pow: base dtype T, exponent any numeric dtype; the result has the base's dtype. The
/// exponent is widened to int64 (integers) or double (floats, and uint64 under a float
/// base), in scratch unless it already is one, so the device code has one Pow per base dtype
/// and exponent kind.
class PowKernel final : public Kernel {
 public:
  explicit PowKernel(const KernelInfo& info) : legacy_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.required_input(0);
    Tensor b = legacy_.apply(ctx, a, ctx.required_input(1));
    Shape shape = broadcast_shapes(ctx.label(), {a.shape(), b.shape()});
    DType base = ew_type(ctx, a.dtype(), to_ew(a.dtype()) && ew::in_set(ew::Set::PowBase, *to_ew(a.dtype())));
    DType et = ew_type(ctx, b.dtype(), to_ew(b.dtype()) && ew::is_numeric(*to_ew(b.dtype())));
    Tensor& y = ctx.allocate_output(0, a.dtype(), shape);
    if (y.numel() == 0) return;
    cudaStream_t s = stream_of(ctx);
    // A float base takes a uint64 exponent as a double (as the CPU: past int64 it is no -1).
    const bool exp_int = ew::is_int(et) && !(et == DType::U64 && ew::is_float(base));
    const void* e = b.raw();
    Tensor wide;
    if (et != (exp_int ? DType::I64 : DType::F64)) {
      wide = ctx.scratch(exp_int ? DataType::Int64 : DataType::Double, b.shape());
      ew::launch_widen_exponent(et, exp_int, b.raw(), wide.raw(), b.numel(), s);
      check_launch();
      e = wide.raw();
    }
    ew::launch_pow(base, exp_int, a.raw(), e, y.raw(),
                   make_broadcast(ctx.label(), shape, {a.shape(), b.shape()}),
                   a.dtype() == b.dtype(), b.numel() == 1, s);
    check_launch();
  }

 private:
  LegacyBroadcast legacy_;
};

/// Sum, Mean, Min, Max over one or more inputs broadcast together, folded pairwise into the
/// output (the CPU's order, so float sums round the same way).
class VariadicKernel final : public Kernel {
 public:
  VariadicKernel(BinaryOp op, bool mean) : op_(op), mean_(mean) {}
  void compute(KernelContext& ctx) const override {
    std::vector<const Tensor*> ins;
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      ins.push_back(&ctx.required_input(i));
      shapes.push_back(ins.back()->shape());
    }
    ONYX_CHECK(!ins.empty(), "[{}] needs at least one input", ctx.label());
    check_same_dtype(ctx, ins);
    Shape shape = broadcast_shapes(ctx.label(), shapes);
    Tensor& y = ctx.allocate_output(0, ins[0]->dtype(), shape);
    if (y.numel() == 0) return;
    cudaStream_t s = stream_of(ctx);
    if (ins.size() == 1) {
      ONYX_CUDA_CHECK(cudaMemcpyAsync(y.raw(), ins[0]->raw(), y.nbytes(), cudaMemcpyDeviceToDevice, s));
      return;
    }
    launch_binary(ctx, op_, *ins[0], *ins[1], y, {});
    for (size_t k = 2; k < ins.size(); ++k) launch_binary(ctx, op_, y, *ins[k], y, {});
    if (mean_) {
      DType t = ew_type(ctx, y.dtype(), is_float(y.dtype()));
      ew::launch_unary(UnaryOp::DivBy, t, y.raw(), y.raw(), y.numel(),
                       {float(ins.size()), 0}, s);
      check_launch();
    }
  }

 private:
  BinaryOp op_;
  bool mean_;
};

/// Where(cond, X, Y) with 3-way broadcasting; moves elements of any non-string dtype.
void where_compute(KernelContext& ctx) {
  const Tensor& c = ctx.required_input(0);
  const Tensor& x = ctx.required_input(1);
  const Tensor& y = ctx.required_input(2);
  ONYX_CHECK(c.dtype() == DataType::Bool, "[{}] condition must be bool, found {}", ctx.label(),
             dtype_name(c.dtype()));
  check_same_dtype(ctx, {&x, &y}, 1);
  ONYX_CHECK(x.dtype() != DataType::String, "[{}] string tensors cannot be on a CUDA device",
             ctx.label());
  Shape shape = broadcast_shapes(ctx.label(), {c.shape(), x.shape(), y.shape()});
  Tensor& out = ctx.allocate_output(0, x.dtype(), shape);
  if (out.numel() == 0) return;
  ew::launch_where(int(dtype_size(x.dtype())), c.data<bool>(), x.raw(), y.raw(), out.raw(),
                   make_broadcast(ctx.label(), shape, {c.shape(), x.shape(), y.shape()}),
                   stream_of(ctx));
  check_launch();
}

// ---- registration ---------------------------------------------------------------------------

struct UnaryReg {
  const char* name;
  UnaryOp op;
  int since;
};
constexpr UnaryReg kUnary[] = {
    {"Relu", UnaryOp::Relu, 1},           {"LeakyRelu", UnaryOp::LeakyRelu, 1},
    {"Elu", UnaryOp::Elu, 1},             {"Selu", UnaryOp::Selu, 1},
    {"Celu", UnaryOp::Celu, 12},          {"Sigmoid", UnaryOp::Sigmoid, 1},
    {"HardSigmoid", UnaryOp::HardSigmoid, 1}, {"HardSwish", UnaryOp::HardSwish, 14},
    {"Tanh", UnaryOp::Tanh, 1},           {"Softplus", UnaryOp::Softplus, 1},
    {"Softsign", UnaryOp::Softsign, 1},   {"Mish", UnaryOp::Mish, 18},
    {"ThresholdedRelu", UnaryOp::ThresholdedRelu, 10}, {"Shrink", UnaryOp::Shrink, 9},
    {"Erf", UnaryOp::Erf, 9},             {"Exp", UnaryOp::Exp, 1},
    {"Log", UnaryOp::Log, 1},             {"Sqrt", UnaryOp::Sqrt, 1},
    {"Reciprocal", UnaryOp::Reciprocal, 1}, {"Abs", UnaryOp::Abs, 1},
    {"Neg", UnaryOp::Neg, 1},             {"Floor", UnaryOp::Floor, 1},
    {"Ceil", UnaryOp::Ceil, 1},           {"Round", UnaryOp::Round, 11},
    {"Sign", UnaryOp::Sign, 9},           {"Sin", UnaryOp::Sin, 7},
    {"Cos", UnaryOp::Cos, 7},             {"Tan", UnaryOp::Tan, 7},
    {"Asin", UnaryOp::Asin, 7},           {"Acos", UnaryOp::Acos, 7},
    {"Atan", UnaryOp::Atan, 7},           {"Sinh", UnaryOp::Sinh, 9},
    {"Cosh", UnaryOp::Cosh, 9},           {"Asinh", UnaryOp::Asinh, 9},
    {"Acosh", UnaryOp::Acosh, 9},         {"Atanh", UnaryOp::Atanh, 9},
    {"BitwiseNot", UnaryOp::BitwiseNot, 18}, {"Not", UnaryOp::Not, 1},
};

struct BinaryReg {
  const char* name;
  BinaryOp op;
  int since;
};
constexpr BinaryReg kBinary[] = {
    {"Add", BinaryOp::Add, 1},           {"Sub", BinaryOp::Sub, 1},
    {"Mul", BinaryOp::Mul, 1},           {"Div", BinaryOp::Div, 1},
    {"Mod", BinaryOp::Mod, 10},          {"Equal", BinaryOp::Equal, 1},
    {"Less", BinaryOp::Less, 1},         {"LessOrEqual", BinaryOp::LessOrEqual, 12},
    {"Greater", BinaryOp::Greater, 1},   {"GreaterOrEqual", BinaryOp::GreaterOrEqual, 12},
    {"And", BinaryOp::And, 1},           {"Or", BinaryOp::Or, 1},
    {"Xor", BinaryOp::Xor, 1},           {"BitShift", BinaryOp::BitShift, 11},
    {"BitwiseAnd", BinaryOp::BitwiseAnd, 18}, {"BitwiseOr", BinaryOp::BitwiseOr, 18},
    {"BitwiseXor", BinaryOp::BitwiseXor, 18}, {"PRelu", BinaryOp::PRelu, 1},
};

std::vector<DataType> unary_types(UnaryOp op) {
  return types_where([op](DType t) { return ew::unary_supports(op, t); });
}
std::vector<DataType> binary_types(BinaryOp op) {
  return types_where([op](DType t) { return ew::binary_supports(op, t); });
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& r) {
  auto add = [&r](const char* op, const char* domain, int since, std::vector<DataType> types,
                  KernelFactory f, std::vector<int> host_inputs = {}, int type_input = 0) {
    r.add({.op_type = op, .domain = domain, .since = since, .provider = kProvider,
           .type_input = type_input, .types = std::move(types), .create = std::move(f),
           .host_inputs = std::move(host_inputs)});
  };
  for (const UnaryReg& u : kUnary)
    add(u.name, "", u.since, unary_types(u.op), [op = u.op](const KernelInfo& i) {
      return std::make_unique<UnaryKernel>(i, op);
    });
  // Gelu (ai.onnx 20 and ONNX Runtime's contrib spelling): GeluErf stands for "read the
  // approximate attribute".
  auto gelu = [](const KernelInfo& i) { return std::make_unique<UnaryKernel>(i, UnaryOp::GeluErf); };
  add("Gelu", "", 20, unary_types(UnaryOp::GeluErf), gelu);
  add("Gelu", "com.microsoft", 1, unary_types(UnaryOp::GeluErf), gelu);
  add("FastGelu", "com.microsoft", 1, unary_types(UnaryOp::GeluTanh),
      function_factory(fast_gelu_compute));
  auto float_and_f8 = types_where([](DType t) { return ew::is_float(t) || t >= DType::F8E4M3FN; });
  add("IsNaN", "", 9, float_and_f8, make_factory<FloatClassKernel>());
  add("IsInf", "", 10, float_and_f8, make_factory<FloatClassKernel>());
  add("Clip", "", 1, types_where(ew::is_numeric), function_factory(clip_compute), {1, 2});

  for (const BinaryReg& b : kBinary)
    add(b.name, "", b.since, binary_types(b.op), [op = b.op](const KernelInfo& i) {
      return std::make_unique<BinaryKernel>(i, op);
    });
  add("Pow", "", 1, types_where([](DType t) { return ew::in_set(ew::Set::PowBase, t); }),
      make_factory<PowKernel>());
  auto variadic = [&](const char* op, BinaryOp b, bool mean, std::vector<DataType> types) {
    add(op, "", 1, std::move(types),
        [b, mean](const KernelInfo&) { return std::make_unique<VariadicKernel>(b, mean); });
  };
  variadic("Min", BinaryOp::Min, false, binary_types(BinaryOp::Min));
  variadic("Max", BinaryOp::Max, false, binary_types(BinaryOp::Max));
  variadic("Sum", BinaryOp::Add, false, types_where(ew::is_float));
  variadic("Mean", BinaryOp::Add, true, types_where(ew::is_float));

  std::vector<DataType> where_types;
  for (DataType t : all_types() + std::vector<DataType>{
                        DataType::Complex64, DataType::Complex128, DataType::Float8E4M3FN,
                        DataType::Float8E4M3FNUZ, DataType::Float8E5M2, DataType::Float8E5M2FNUZ,
                        DataType::Float8E8M0, DataType::Float4E2M1, DataType::UInt4, DataType::Int4,
                        DataType::UInt2, DataType::Int2})
    if (t != DataType::String) where_types.push_back(t);
  add("Where", "", 9, where_types, function_factory(where_compute), {}, 1);
}

}  // namespace onyx::cuda
