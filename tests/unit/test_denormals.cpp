// kernels/denormals.h and SessionOptions::flush_denormals: denormal floats are read and
// written as zero inside a session's runs when asked (on the calling thread and the kernels'
// threads alike), kept otherwise, and every thread gets its own mode back afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/denormals.h"
#include "test_util.h"

namespace onyx {
namespace {

#if defined(__x86_64__) || defined(__i386__)

// 1e-30 * 1e-10: a product below float32's smallest normal (1.18e-38).
constexpr float kSmall = 1e-30f, kTiny = 1e-10f;

/// y = x * k (elementwise over `n` values), z = d + 0 (a denormal input read back).
Session product_session(bool flush, int threads, int64_t n) {
  test::ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{n});
  b.input("k", DataType::Float, Shape{n});
  b.input("d", DataType::Float, Shape{n});
  b.input("zero", DataType::Float, Shape{n});
  b.node("Mul", {"x", "k"}, {"y"});
  b.node("Add", {"d", "zero"}, {"z"});
  b.output("y").output("z");
  SessionOptions opts;
  opts.flush_denormals = flush;
  opts.intra_op_threads = threads;
  return b.session(opts);
}

NamedTensors feeds(int64_t n) {
  const float denormal = std::numeric_limits<float>::denorm_min() * 1000.0f;
  return {{"x", Tensor::from_vector<float>({n}, std::vector<float>(n, kSmall))},
          {"k", Tensor::from_vector<float>({n}, std::vector<float>(n, kTiny))},
          {"d", Tensor::from_vector<float>({n}, std::vector<float>(n, denormal))},
          {"zero", Tensor::from_vector<float>({n}, std::vector<float>(n, 0.0f))}};
}

TEST(FlushDenormals, ScopesNestAndRestoreTheCallingThread) {
  ASSERT_FALSE(FlushDenormals::active_here()) << "the test process starts with IEEE denormals";
  {
    FlushDenormals outer(true, 2);
    EXPECT_TRUE(FlushDenormals::active_here());
    {
      FlushDenormals inner(true, 2);
      EXPECT_TRUE(FlushDenormals::active_here());
    }
    EXPECT_TRUE(FlushDenormals::active_here()) << "the inner scope must not end the outer one";
    FlushDenormals off(false, 2);
    EXPECT_TRUE(FlushDenormals::active_here());
  }
  EXPECT_FALSE(FlushDenormals::active_here());
}

TEST(FlushDenormals, SessionOptionFlushesOnEveryThreadAndOnlyDuringRuns) {
  // 1 and 2 threads; 2^20 values so that elementwise kernels split the work across threads.
  for (int threads : {1, 2}) {
    const int64_t n = int64_t{1} << 20;
    Session kept = product_session(false, threads, n), flushed = product_session(true, threads, n);
    auto k = kept.run(feeds(n)), f = flushed.run(feeds(n));
    const float* ky = k.at("y").data<float>();
    const float* fy = f.at("y").data<float>();
    const float* kz = k.at("z").data<float>();
    const float* fz = f.at("z").data<float>();
    for (int64_t i = 0; i < n; i += 4099) {
      EXPECT_EQ(std::fpclassify(ky[i]), FP_SUBNORMAL) << threads << " threads, y[" << i << "]";
      EXPECT_EQ(fy[i], 0.0f) << threads << " threads, y[" << i << "]";
      EXPECT_EQ(std::fpclassify(kz[i]), FP_SUBNORMAL) << threads << " threads, z[" << i << "]";
      EXPECT_EQ(fz[i], 0.0f) << threads << " threads, z[" << i << "]";
    }
    EXPECT_FALSE(FlushDenormals::active_here()) << "a run must give the caller its mode back";
    // The workers too: a session without the option, run after, keeps denormals everywhere.
    auto again = kept.run(feeds(n));
    EXPECT_EQ(std::fpclassify(again.at("y").data<float>()[n - 1]), FP_SUBNORMAL);
    EXPECT_EQ(std::fpclassify(again.at("y").data<float>()[0]), FP_SUBNORMAL);
  }
}

TEST(FlushDenormals, AFailedRunRestoresTheModeAndTheSessionStaysUsable) {
  Session s = product_session(true, 2, 8);
  NamedTensors bad = feeds(8);
  bad["x"] = Tensor::from_vector<float>({3}, {1, 2, 3});
  EXPECT_THROW(s.run(bad), Error);
  EXPECT_FALSE(FlushDenormals::active_here());
  EXPECT_EQ(s.run(feeds(8)).at("y").data<float>()[0], 0.0f);
}

#endif

}  // namespace
}  // namespace onyx
