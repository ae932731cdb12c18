#include "optimizers/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "graph/error.h"
#include "kernels/cpu/optimizer_math.h"
#include "kernels/parallel.h"

namespace onyx::optim {
namespace {

constexpr int64_t kBlock = 16384;

/// Calls fn(block_index, begin, end) for each kBlock-sized block of [0, n), in parallel.
template <typename F>
void for_each_block(int64_t n, int threads, F&& fn) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, threads, 2, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) fn(k, k * kBlock, std::min(n, (k + 1) * kBlock));
  });
}

void check_buffer(const float* g, int64_t n, const char* who) {
  ONYX_CHECK(n >= 0 && (n == 0 || g),
             "[optimizer] {}: expected a non-null buffer of n >= 0 floats but got n = {} at {}",
             who, n, static_cast<const void*>(g));
}

}  // namespace

double global_norm(const float* g, int64_t n, int threads) {
  check_buffer(g, n, "global_norm");
  std::vector<double> partial((n + kBlock - 1) / kBlock, 0.0);
  for_each_block(n, threads, [&](int64_t k, int64_t b, int64_t e) {
    partial[k] = cpu::sum_squares(g + b, e - b);
  });
  double s = 0;
  for (double p : partial) s += p;
  return std::sqrt(s);
}

double clip_by_global_norm(float* g, int64_t n, double max_norm, int threads) {
  const double norm = global_norm(g, n, threads);
  clip_to_norm(g, n, norm, max_norm, threads);
  return norm;
}

void clip_to_norm(float* g, int64_t n, double norm, double max_norm, int threads) {
  check_buffer(g, n, "clip_to_norm");
  if (max_norm <= 0 || !std::isfinite(norm)) return;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    for_each_block(n, threads,
                   [&](int64_t, int64_t b, int64_t e) { cpu::scale_in_place(g + b, e - b, c); });
  }
}

double copy_sum_squares(float* dst, const float* src, int64_t n, int threads) {
  check_buffer(dst, n, "copy_sum_squares");
  check_buffer(src, n, "copy_sum_squares");
  std::vector<double> partial((n + kBlock - 1) / kBlock, 0.0);
  for_each_block(n, threads, [&](int64_t k, int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, static_cast<size_t>(e - b) * sizeof(float));
    partial[k] = cpu::sum_squares(dst + b, e - b);  // the block just written, still in cache
  });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

bool has_non_finite(const float* g, int64_t n, int threads) {
  check_buffer(g, n, "has_non_finite");
  std::vector<char> bad((n + kBlock - 1) / kBlock, 0);
  for_each_block(n, threads,
                 [&](int64_t k, int64_t b, int64_t e) { bad[k] = !cpu::all_finite(g + b, e - b); });
  return std::any_of(bad.begin(), bad.end(), [](char c) { return c != 0; });
}

}  // namespace onyx::optim
