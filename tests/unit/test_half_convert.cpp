// The block conversions of kernels/cpu/half_convert.h (F16C / AVX2) against the scalar
// float16 / bfloat16 conversions of graph/dtype.h: the same bits for every 16-bit value
// widened, and for floats around every 16-bit value (ties, carries, subnormals, overflow)
// narrowed; NaN stays NaN with its sign. Lengths that are not a multiple of the vector width
// and NaNs between ordinary values exercise the tails and the NaN fallback.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "kernels/cpu/half_convert.h"

namespace onyx::test {
namespace {

/// Every float whose top half is any 16-bit pattern and whose bottom half is one of a few
/// rounding cases, in an order that puts NaNs among ordinary values.
std::vector<float> narrowing_inputs() {
  const uint32_t lows[] = {0x0000, 0x0001, 0x1234, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) v.push_back(std::bit_cast<float>(hi << 16 | lo));
  v.push_back(1.0f);  // a tail of odd length
  v.push_back(-2.5f);
  v.push_back(65520.0f);
  return v;
}

template <typename H>
void check_narrow() {
  const std::vector<float> x = narrowing_inputs();
  std::vector<H> y(x.size());
  cpu::narrow(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const H want(x[i]);
    if (std::isnan(x[i])) {
      ASSERT_TRUE(std::isnan(float(y[i]))) << std::hex << std::bit_cast<uint32_t>(x[i]);
      ASSERT_EQ(y[i].bits >> 15, want.bits >> 15) << std::hex << std::bit_cast<uint32_t>(x[i]);
    } else {
      ASSERT_EQ(y[i].bits, want.bits) << std::hex << std::bit_cast<uint32_t>(x[i]);
    }
  }
}

template <typename H>
void check_widen() {
  std::vector<H> x(0x10000 + 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = H::from_bits(uint16_t(i * 0x9e37u + (i >> 16)));
  std::vector<float> y(x.size());
  cpu::widen(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = float(x[i]);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(y[i])) << std::hex << x[i].bits;
    else
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want)) << x[i].bits;
  }
}

TEST(LowPrecisionConvert, BlockNarrowMatchesScalar) {
  check_narrow<bfloat16>();
  check_narrow<float16>();
}

TEST(LowPrecisionConvert, BlockWidenMatchesScalar) {
  check_widen<bfloat16>();
  check_widen<float16>();
}

TEST(LowPrecisionConvert, MapBlocksCoversEveryElementOnce) {
  std::vector<bfloat16> x(3 * cpu::kHalfBlock + 5), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = bfloat16(float(i % 200));
  cpu::map_blocks(x.data(), y.data(), static_cast<int64_t>(x.size()),
                  [](const float* in, float* out, int64_t, int64_t m) {
                    for (int64_t i = 0; i < m; ++i) out[i] = in[i] + 1.0f;
                  });
  double sum = 0;
  cpu::read_blocks(y.data(), static_cast<int64_t>(y.size()),
                   [&](const float* v, int64_t i0, int64_t m) {
                     for (int64_t i = 0; i < m; ++i) {
                       ASSERT_EQ(v[i], float((i0 + i) % 200) + 1.0f);
                       sum += v[i];
                     }
                   });
  EXPECT_GT(sum, 0.0);
}

}  // namespace
}  // namespace onyx::test
