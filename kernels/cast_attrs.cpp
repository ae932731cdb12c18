// Cast's `to` and `round_mode` (kernels/cast_attrs.h).
#include "kernels/cast_attrs.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace onyx {

DataType parse_cast_to(const KernelInfo& info) {
  const Attribute* a = info.node.attr("to");
  ONYX_CHECK(a, "[{}] required attribute 'to' is missing", info.label());
  if (a->type == Attribute::Type::String) {  // Cast-1 spells the type: "FLOAT", "INT64", ...
    std::string s = a->s;
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return dtype_from_name(s);
  }
  ONYX_CHECK(a->type == Attribute::Type::Int && dtype_is_known(int32_t(a->i)),
             "[{}] attribute 'to' must be a known data type number, found {}", info.label(),
             a->type == Attribute::Type::Int ? std::to_string(a->i) : attr_type_name(a->type));
  return DataType(a->i);
}

E8M0Round parse_e8m0_round(const KernelInfo& info) {
  std::string m = info.node.attr_string("round_mode", "up");
  if (m == "up") return E8M0Round::Up;
  if (m == "down") return E8M0Round::Down;
  if (m == "nearest") return E8M0Round::Nearest;
  ONYX_THROW("[{}] attribute round_mode must be 'up', 'down' or 'nearest', found '{}'",
             info.label(), m);
}

}  // namespace onyx
