#include "graph/dtype.h"

#include <array>

#include "graph/error.h"

namespace onyx {
namespace {

struct DtypeRow {
  DataType type;
  const char* name;
  size_t size;
};

constexpr std::array<DtypeRow, 27> kRows{{
    {DataType::Undefined, "undefined", 0},
    {DataType::Float, "float", 4},
    {DataType::UInt8, "uint8", 1},
    {DataType::Int8, "int8", 1},
    {DataType::UInt16, "uint16", 2},
    {DataType::Int16, "int16", 2},
    {DataType::Int32, "int32", 4},
    {DataType::Int64, "int64", 8},
    {DataType::String, "string", sizeof(std::string)},
    {DataType::Bool, "bool", 1},
    {DataType::Float16, "float16", 2},
    {DataType::Double, "double", 8},
    {DataType::UInt32, "uint32", 4},
    {DataType::UInt64, "uint64", 8},
    {DataType::Complex64, "complex64", 8},
    {DataType::Complex128, "complex128", 16},
    {DataType::BFloat16, "bfloat16", 2},
    {DataType::Float8E4M3FN, "float8e4m3fn", 1},
    {DataType::Float8E4M3FNUZ, "float8e4m3fnuz", 1},
    {DataType::Float8E5M2, "float8e5m2", 1},
    {DataType::Float8E5M2FNUZ, "float8e5m2fnuz", 1},
    {DataType::UInt4, "uint4", 1},
    {DataType::Int4, "int4", 1},
    {DataType::Float4E2M1, "float4e2m1", 1},
    {DataType::Float8E8M0, "float8e8m0", 1},
    {DataType::UInt2, "uint2", 1},
    {DataType::Int2, "int2", 1},
}};

const DtypeRow& row(DataType t) {
  auto i = static_cast<size_t>(t);
  ONYX_CHECK(i < kRows.size(), "[dtype] unknown element type {}", static_cast<int>(t));
  return kRows[i];
}

}  // namespace

bool dtype_is_known(int32_t v) { return v >= 0 && static_cast<size_t>(v) < kRows.size(); }
size_t dtype_size(DataType t) { return row(t).size; }
std::string dtype_name(DataType t) {
  if (!dtype_is_known(static_cast<int32_t>(t))) return fmt::format("dtype#{}", static_cast<int>(t));
  return row(t).name;
}

DataType dtype_from_name(const std::string& name) {
  for (const auto& r : kRows)
    if (name == r.name) return r.type;
  ONYX_THROW("[dtype] unknown element type name '{}'", name);
}

bool is_float(DataType t) {
  return t == DataType::Float || t == DataType::Double || t == DataType::Float16 ||
         t == DataType::BFloat16;
}
bool is_float8(DataType t) {
  switch (t) {
    case DataType::Float8E4M3FN:
    case DataType::Float8E4M3FNUZ:
    case DataType::Float8E5M2:
    case DataType::Float8E5M2FNUZ:
    case DataType::Float8E8M0:
    case DataType::Float4E2M1:
      return true;
    default:
      return false;
  }
}
bool is_signed_int(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::Int4:
    case DataType::Int2:
      return true;
    default:
      return false;
  }
}
bool is_unsigned_int(DataType t) {
  switch (t) {
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64:
    case DataType::UInt4:
    case DataType::UInt2:
      return true;
    default:
      return false;
  }
}
bool is_sub_byte(DataType t) {
  return t == DataType::Int4 || t == DataType::UInt4 || t == DataType::Int2 ||
         t == DataType::UInt2 || t == DataType::Float4E2M1;
}

}  // namespace onyx
