#include "kernels/shape_util.h"

#include <algorithm>

namespace onyx {

Shape broadcast_shapes(std::string_view who, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (s[i] == o || s[i] == 1) continue;
      if (o == 1) {
        o = s[i];
        continue;
      }
      std::vector<std::string> all;
      for (const Shape& t : shapes) all.push_back(shape_str(t));
      ONYX_THROW(
          "[{}] input shapes {} cannot be broadcast together (dimension {} from the end "
          "is {} in one and {} in another)",
          who, fmt::join(all, ", "), rank - off - i, o, s[i]);
    }
  }
  return out;
}

}  // namespace onyx
