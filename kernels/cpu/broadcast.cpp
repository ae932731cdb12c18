#include "kernels/cpu/broadcast.h"

#include <algorithm>

#include "graph/error.h"

namespace onyx::cpu {

BroadcastPlan::BroadcastPlan(const Shape& out, const std::vector<Shape>& inputs) {
  const size_t n_in = inputs.size(), rank = out.size();
  numel = shape_numel(out);
  // Per input, right-aligned element strides over `out`, 0 where broadcast.
  std::vector<std::vector<int64_t>> full(n_in, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n_in; ++k) {
    const Shape& s = inputs[k];
    int64_t stride = 1;
    for (size_t j = s.size(); j-- > 0;) {
      size_t d = rank - s.size() + j;
      full[k][d] = s[j] == 1 ? 0 : stride;
      stride *= s[j];
    }
  }
  // Keep dimensions of size > 1, merging each into the kept one after it when contiguous.
  Shape dims;
  std::vector<std::vector<int64_t>> st(n_in);
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    dims.push_back(out[d]);
    for (size_t k = 0; k < n_in; ++k) st[k].push_back(full[k][d]);
  }
  Shape mdims;
  std::vector<std::vector<int64_t>> mst(n_in);
  for (size_t d = 0; d < dims.size(); ++d) {
    bool merge = !mdims.empty();
    for (size_t k = 0; k < n_in && merge; ++k) merge = mst[k].back() == st[k][d] * dims[d];
    if (merge) {
      mdims.back() *= dims[d];
      for (size_t k = 0; k < n_in; ++k) mst[k].back() = st[k][d];
    } else {
      mdims.push_back(dims[d]);
      for (size_t k = 0; k < n_in; ++k) mst[k].push_back(st[k][d]);
    }
  }
  strides.assign(n_in, {});
  step.assign(n_in, 0);
  if (mdims.empty()) {  // scalar output (or all ones)
    inner = 1;
    return;
  }
  inner = mdims.back();
  outer.assign(mdims.begin(), mdims.end() - 1);
  for (size_t k = 0; k < n_in; ++k) {
    step[k] = mst[k].back();
    strides[k].assign(mst[k].begin(), mst[k].end() - 1);
  }
}

}  // namespace onyx::cpu
