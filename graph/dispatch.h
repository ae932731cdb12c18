// Dtype dispatch: call a templated lambda with the C++ type matching a runtime DataType.
//
//   dispatch<FloatTypes>(t.dtype(), "Relu", [&]<typename T>() { relu<T>(...); });
#pragma once

#include <string_view>

#include "graph/dtype.h"
#include "graph/error.h"

namespace onyx {

template <typename... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, double, float16, bfloat16>;
using SignedIntTypes = TypeList<int8_t, int16_t, int32_t, int64_t>;
using UnsignedIntTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;
using IntTypes = TypeList<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericTypes = TypeList<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t,
                              uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericBoolTypes = TypeList<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t,
                                  uint8_t, uint16_t, uint32_t, uint64_t, bool>;
using AllTypes = TypeList<float, double, float16, bfloat16, int8_t, int16_t, int32_t, int64_t,
                          uint8_t, uint16_t, uint32_t, uint64_t, bool, std::string>;

namespace detail {
template <typename F, typename... Ts>
bool dispatch_impl(TypeList<Ts...>, DataType dt, F&& f) {
  return ((dt == dtype_of<Ts>() ? (f.template operator()<Ts>(), true) : false) || ...);
}
}  // namespace detail

/// Calls f.template operator()<T>() for the T of `dt` in List; onyx::Error naming `who`
/// when `dt` is not in List.
template <typename List, typename F>
void dispatch(DataType dt, std::string_view who, F&& f) {
  if (!detail::dispatch_impl(List{}, dt, f))
    ONYX_THROW("[{}] dtype {} is not supported", who, dtype_name(dt));
}

/// Byte-width dispatch for ops that only move data: calls f with an unsigned type of the
/// element's size (strings excluded).
template <typename F>
void dispatch_by_size(DataType dt, std::string_view who, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f.template operator()<uint8_t>(); break;
    case 2: f.template operator()<uint16_t>(); break;
    case 4: f.template operator()<uint32_t>(); break;
    case 8: f.template operator()<uint64_t>(); break;
    case 16: f.template operator()<__uint128_t>(); break;
    default: ONYX_THROW("[{}] cannot move elements of dtype {}", who, dtype_name(dt));
  }
}

}  // namespace onyx
