// Rank-dependent test data and float64 references for the collective tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "distributed/communicator.h"
#include "graph/tensor.h"

namespace onyx::dist::test {

/// Small integers (exact in every dtype, sums of four exact even in bfloat16), different
/// per rank and per element so misplaced blocks show.
inline int64_t value(int rank, int64_t i, bool is_unsigned) {
  int64_t v = (i * 7 + rank * 13 + (i / 5) * 3) % 17;
  return is_unsigned ? v : v - 8;
}

/// float64 reference of op over ranks of value(r, i). Avg on integers truncates toward zero.
inline double reference(ReduceOp op, int size, int64_t i, bool is_unsigned, bool integer) {
  double sum = 0, mx = -1e300;
  int64_t isum = 0;
  for (int r = 0; r < size; ++r) {
    int64_t v = value(r, i, is_unsigned);
    sum += double(v);
    isum += v;
    mx = std::max(mx, double(v));
  }
  if (op == ReduceOp::Max) return mx;
  if (op == ReduceOp::Sum) return sum;
  return integer ? double(isum / size) : sum / size;
}

template <typename T>
Tensor filled(int rank, int64_t n, int64_t first = 0) {
  Tensor t = Tensor::empty(dtype_of<T>(), {n});
  T* p = t.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = T(static_cast<acc_t<T>>(value(rank, first + i, std::is_unsigned_v<T>)));
  }
  return t;
}

template <typename T>
double at(const Tensor& t, int64_t i) {
  return double(static_cast<acc_t<T>>(t.data<T>()[i]));
}

/// Tolerance of one rounding in T relative to |ref| (0 for integers).
template <typename T>
double tolerance(double ref) {
  double eps = std::is_integral_v<T> ? 0
               : std::is_same_v<T, float16> ? 1.0 / 1024
               : std::is_same_v<T, bfloat16> ? 1.0 / 128
               : std::is_same_v<T, float> ? 1e-6 : 1e-14;
  return eps * std::max(1.0, std::fabs(ref));
}

/// Checks every element against `ref(i)`; stops at the first mismatch with a clear message.
template <typename T, typename Ref>
void expect_all(const Tensor& t, Ref ref, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    double want = ref(i), got = at<T>(t, i);
    if (std::fabs(got - want) > tolerance<T>(want)) {
      ADD_FAILURE() << what << ": element " << i << " of " << t.numel() << " is " << got
                    << ", expected " << want;
      return;
    }
  }
}

}  // namespace onyx::dist::test
