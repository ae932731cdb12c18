// CUDA Cast and CastLike between every non-string element type (the numeric types, bool,
// float16 / bfloat16, the float8 family with saturate and round_mode, float4e2m1 and the
// sub-byte integers), converting as kernels/cpu/cast.cpp does; device code in cast.cu.
// Strings cannot live on the device: a Cast to string throws NotImplemented when the kernel
// is built, so the node belongs on the CPU provider.
#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "kernels/cast_attrs.h"
#include "kernels/cuda/cast_launch.h"
#include "kernels/cuda/cuda_common.h"

namespace onyx::cuda {
namespace {

using cast::CType;

constexpr std::array<std::pair<DataType, CType>, int(CType::kCount)> kTypes = {{
    {DataType::Float, CType::F32},          {DataType::Double, CType::F64},
    {DataType::Float16, CType::F16},        {DataType::BFloat16, CType::BF16},
    {DataType::Int8, CType::I8},            {DataType::Int16, CType::I16},
    {DataType::Int32, CType::I32},          {DataType::Int64, CType::I64},
    {DataType::UInt8, CType::U8},           {DataType::UInt16, CType::U16},
    {DataType::UInt32, CType::U32},         {DataType::UInt64, CType::U64},
    {DataType::Bool, CType::Bool},          {DataType::Float8E4M3FN, CType::F8E4M3FN},
    {DataType::Float8E4M3FNUZ, CType::F8E4M3FNUZ}, {DataType::Float8E5M2, CType::F8E5M2},
    {DataType::Float8E5M2FNUZ, CType::F8E5M2FNUZ}, {DataType::Float8E8M0, CType::F8E8M0},
    {DataType::Float4E2M1, CType::F4E2M1},  {DataType::Int4, CType::I4},
    {DataType::UInt4, CType::U4},           {DataType::Int2, CType::I2},
    {DataType::UInt2, CType::U2},
}};

std::optional<CType> to_ctype(DataType t) {
  for (auto [d, c] : kTypes)
    if (d == t) return c;
  return std::nullopt;
}

/// onyx::E8M0Round as the launcher's enum.
cast::E8M0Round parse_round(const KernelInfo& info) {
  switch (parse_e8m0_round(info)) {
    case E8M0Round::Down: return cast::E8M0Round::Down;
    case E8M0Round::Nearest: return cast::E8M0Round::Nearest;
    case E8M0Round::Up: break;
  }
  return cast::E8M0Round::Up;
}

/// Cast (target from `to`) and CastLike (target = input 1's dtype, read from its metadata).
class CastKernel final : public Kernel {
 public:
  explicit CastKernel(const KernelInfo& info)
      : like_(info.node.op_type == "CastLike"),
        to_(like_ ? DataType::Undefined : parse_cast_to(info)),
        saturate_(info.node.attr_int("saturate", 1) != 0),
        round_(parse_round(info)) {
    if (!like_ && !to_ctype(to_))
      throw NotImplemented(fmt::format("[{}] Cast to {} has no CUDA kernel (it runs on the CPU)",
                                       info.label(), dtype_name(to_)));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const DataType to = like_ ? ctx.required_input(1).dtype() : to_;
    const std::optional<CType> from = to_ctype(x.dtype()), dst = to_ctype(to);
    ONYX_CHECK(from && dst, "[{}] cast from {} to {} has no CUDA kernel", ctx.label(),
               dtype_name(x.dtype()), dtype_name(to));
    Tensor& y = ctx.allocate_output(0, to, x.shape());
    if (x.numel() == 0) return;
    cudaStream_t s = stream_of(ctx);
    if (x.dtype() == to) {
      ONYX_CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, s));
      return;
    }
    cast::launch_cast(*from, *dst, x.raw(), y.raw(), x.numel(), saturate_, round_, s);
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

 private:
  bool like_;
  DataType to_;
  bool saturate_;
  cast::E8M0Round round_;
};

}  // namespace

void register_cast_kernels(KernelRegistry& r) {
  std::vector<DataType> types;
  for (auto [d, c] : kTypes) types.push_back(d);
  r.add({.op_type = "Cast", .domain = "", .since = 1, .provider = kProvider, .type_input = 0,
         .types = types, .create = make_factory<CastKernel>()});
  // CastLike reads only input 1's dtype, wherever it lives.
  r.add({.op_type = "CastLike", .domain = "", .since = 15, .provider = kProvider, .type_input = 0,
         .types = types, .create = make_factory<CastKernel>(), .shape_only_inputs = {1}});
}

}  // namespace onyx::cuda
