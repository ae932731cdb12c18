// Fused optimizers, LR schedules, gradient clipping and accumulation, and FlatBuffer, each
// checked against straightforward float64 scalar code written here from the closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "graph/error.h"
#include "kernels/optimizer_kernels.h"
#include "optimizers/flat_buffer.h"
#include "optimizers/grad_accumulate.h"
#include "optimizers/grad_clip.h"
#include "optimizers/loss_scaler.h"
#include "optimizers/lr_schedule.h"
#include "optimizers/optimizer.h"

namespace onyx::optim {
namespace {

/// Odd sizes, one over several 16K-element blocks so the parallel path runs.
FlatBuffer make_params() {
  return FlatBuffer(
      {{"w1", {1}}, {"b7", {7}}, {"w1000", {10, 100}}, {"w4099", {4099}}, {"big", {70001}}});
}

/// Segments with "b7" excluded from weight decay.
std::vector<ParamSegment> segments_of(const FlatBuffer& fb) {
  std::vector<ParamSegment> s = fb.segments();
  s[1].decay = false;
  return s;
}

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A float32 tensor over caller-owned floats (zero copy).
Tensor wrap(float* p, int64_t n) { return Tensor::wrap(DataType::Float, {n}, p); }
Tensor wrap(std::vector<float>& v) { return wrap(v.data(), static_cast<int64_t>(v.size())); }

/// Fills the segments of `buf` with random values (padding stays 0).
void fill_segments(float* buf, const std::vector<ParamSegment>& segs, uint32_t seed) {
  for (const ParamSegment& s : segs) {
    std::vector<float> v = random_floats(s.size, seed++);
    std::copy(v.begin(), v.end(), buf + s.offset);
  }
}

/// The float64 reference: PyTorch SGD/Adam/AdamW and LAMB, one element at a time.
struct Reference {
  OptimizerConfig c;
  std::vector<ParamSegment> segs;
  std::vector<double> p, m, v;  // m is the momentum buffer for sgd
  int64_t t = 0;

  void step(const std::vector<float>& grads, double lr) {
    ++t;
    const double bc1 = 1 - std::pow(c.beta1, double(t)), bc2 = 1 - std::pow(c.beta2, double(t));
    for (const ParamSegment& s : segs) {
      const double wd = s.decay ? c.weight_decay : 0.0;
      std::vector<double> r(s.size);
      double pn = 0, rn = 0;
      for (int64_t k = 0; k < s.size; ++k) {
        const int64_t i = s.offset + k;
        double g = grads[i];
        if (c.name == "sgd") {
          g += wd * p[i];
          if (c.momentum > 0) {
            m[i] = t == 1 ? g : c.momentum * m[i] + g;
            g = c.nesterov ? g + c.momentum * m[i] : m[i];
          }
          p[i] -= lr * g;
        } else if (c.name == "adam" || c.name == "adamw") {
          if (c.name == "adam") g += wd * p[i];
          if (c.name == "adamw") p[i] *= 1 - lr * wd;
          m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
          v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
          p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps);
        } else {  // lamb
          m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
          v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
          r[k] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps) + wd * p[i];
          pn += p[i] * p[i];
          rn += r[k] * r[k];
        }
      }
      if (c.name != "lamb") continue;
      pn = std::sqrt(pn), rn = std::sqrt(rn);
      const double trust = pn > 0 && rn > 0 ? pn / rn : 1.0;
      for (int64_t k = 0; k < s.size; ++k) p[s.offset + k] -= lr * trust * r[k];
    }
  }
};

/// Runs `config` for 4 steps with changing rates and gradients on both the fused optimizer
/// and the reference, and compares every parameter after every step.
void check_against_reference(const OptimizerConfig& config, bool zero_b7 = false) {
  FlatBuffer params = make_params();
  const std::vector<ParamSegment> segs = segments_of(params);
  fill_segments(params.data(), segs, 1);
  if (zero_b7) std::fill(params.data() + segs[1].offset, params.data() + segs[1].offset + 7, 0.f);
  const int64_t n = params.size();
  Reference ref{config, segs, std::vector<double>(params.data(), params.data() + n),
                std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  auto opt = make_optimizer(config, segs);
  const double rates[] = {config.lr, config.lr * 0.5, config.lr * 0.2, config.lr * 0.1};
  for (int s = 0; s < 4; ++s) {
    std::vector<float> grads(n, 0.f);
    fill_segments(grads.data(), segs, 100 + 10 * s);
    Tensor p = params.tensor();
    opt->step(p, wrap(grads), rates[s], 2);
    ref.step(grads, rates[s]);
    ASSERT_EQ(opt->steps_taken(), s + 1);
    int bad = 0;
    for (const ParamSegment& seg : segs)
      for (int64_t i = seg.offset; i < seg.offset + seg.size && bad < 5; ++i) {
        const double want = ref.p[i];
        if (std::fabs(params.data()[i] - want) > 2e-6 + 2e-6 * std::fabs(want)) ++bad;
        EXPECT_NEAR(params.data()[i], want, 2e-6 + 2e-6 * std::fabs(want))
            << config.name << " step " << s << " segment " << seg.name << " element " << i;
      }
    ASSERT_EQ(bad, 0);
  }
  // Padding between segments is never touched.
  for (size_t k = 0; k + 1 < segs.size(); ++k)
    for (int64_t i = segs[k].offset + segs[k].size; i < segs[k + 1].offset; ++i)
      ASSERT_EQ(params.data()[i], 0.f) << "padding element " << i;
}

TEST(OptimSgd, PlainWithWeightDecayMatchesReference) {
  check_against_reference({.name = "sgd", .lr = 0.1, .weight_decay = 0.05});
}

TEST(OptimSgd, MomentumMatchesReference) {
  check_against_reference({.name = "sgd", .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
}

TEST(OptimSgd, NesterovMatchesReference) {
  check_against_reference(
      {.name = "sgd", .lr = 0.1, .momentum = 0.8, .nesterov = true, .weight_decay = 0.02});
}

TEST(OptimAdam, AdamWithL2MatchesReference) {
  check_against_reference({.name = "adam", .lr = 0.01, .weight_decay = 0.1});
}

TEST(OptimAdam, AdamWDecoupledMatchesReference) {
  check_against_reference(
      {.name = "adamw", .lr = 0.01, .weight_decay = 0.1, .beta1 = 0.8, .beta2 = 0.95});
}

TEST(OptimLamb, MatchesReferenceIncludingZeroNormSegment) {
  // b7 starts at zero: its trust ratio is 1 on the first step.
  check_against_reference({.name = "lamb", .lr = 0.01, .weight_decay = 0.01, .eps = 1e-6}, true);
}

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no onyx::Error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[", 0), 0u) << e.what();
  }
}

// set_low_precision_copy: every optimizer's step writes each updated parameter, rounded to the
// copy's type, at its offset (the bits of narrowing the float32 result); copy_to_low_precision
// makes the whole copy; a copy of another type or too short is refused before anything changes.
TEST(OptimLowPrecisionCopy, EachStepWritesTheRoundedParameters) {
  for (DataType dt : {DataType::BFloat16, DataType::Float16})
    for (const char* name : {"sgd", "adamw", "lamb"}) {
      SCOPED_TRACE(fmt::format("{} {}", name, dtype_name(dt)));
      FlatBuffer params = make_params();
      const std::vector<ParamSegment> segs = segments_of(params);
      fill_segments(params.data(), segs, 3);
      const int64_t n = params.size();
      Tensor low = Tensor::zeros(dt, {n});
      auto opt = make_optimizer({.name = name, .lr = 0.01, .momentum = name[0] == 's' ? 0.9 : 0.0}, segs);
      opt->set_low_precision_copy(low);
      for (int s = 0; s < 2; ++s) {
        std::vector<float> grads(n, 0.f);
        fill_segments(grads.data(), segs, 200 + s);
        Tensor p = params.tensor();
        opt->step(p, wrap(grads), 0.01, 2);
        Tensor want = Tensor::zeros(dt, {n});
        copy_to_low_precision(params.tensor(), want, 2);
        for (const ParamSegment& seg : segs)
          ASSERT_EQ(std::memcmp(static_cast<const uint16_t*>(low.raw()) + seg.offset,
                                static_cast<const uint16_t*>(want.raw()) + seg.offset,
                                static_cast<size_t>(seg.size) * 2),
                    0)
              << "step " << s << " segment " << seg.name;
      }
      // The whole copy is narrowing element by element (checked against the scalar conversion).
      Tensor whole = Tensor::zeros(dt, {n});
      copy_to_low_precision(params.tensor(), whole, 1);
      for (int64_t i = 0; i < n; i += 97) {
        const float x = params.data()[i];
        const uint16_t bits = static_cast<const uint16_t*>(whole.raw())[i];
        ASSERT_EQ(bits, dt == DataType::BFloat16 ? bfloat16(x).bits : float16(x).bits) << i;
      }
    }
  FlatBuffer params = make_params();
  auto opt = make_optimizer({.name = "adamw"}, params.segments());
  std::vector<float> grads(params.size(), 0.f);
  Tensor p = params.tensor();
  opt->set_low_precision_copy(Tensor::zeros(DataType::Float, {params.size()}));
  expect_error([&] { opt->step(p, wrap(grads), 0.01, 1); }, "params_low should be a bfloat16 or float16");
  opt->set_low_precision_copy(Tensor::zeros(DataType::BFloat16, {10}));
  expect_error([&] { opt->step(p, wrap(grads), 0.01, 1); }, "params_low should have at least");
  Tensor short_copy = Tensor::zeros(DataType::BFloat16, {3});
  expect_error([&] { copy_to_low_precision(params.tensor(), short_copy, 1); }, "but low has 3");
}

TEST(OptimConfig, NameIsCaseInsensitive) {
  auto opt = make_optimizer({.name = "AdamW"}, {{"x", 0, 3, true}});
  EXPECT_EQ(opt->config().name, "adamw");
  float p[3] = {1, 2, 3}, g[3] = {1, 1, 1};
  Tensor pt = wrap(p, 3);
  opt->step(pt, wrap(g, 3), 0.1, 1);
  // First Adam step moves each element by lr * g / (|g| + eps) after decoupled decay (wd 0).
  EXPECT_NEAR(p[0], 0.9, 1e-6);
  EXPECT_NEAR(p[2], 2.9, 1e-6);
}

TEST(OptimConfig, BadConfigsThrow) {
  const std::vector<ParamSegment> segs{{"x", 0, 4, true}};
  expect_error([&] { make_optimizer({.name = "rmsprop"}, segs); }, "sgd, adam, adamw or lamb");
  expect_error([&] { make_optimizer({.name = "sgd", .nesterov = true}, segs); }, "nesterov");
  expect_error([&] { make_optimizer({.name = "adam", .beta1 = 1.0}, segs); }, "beta1");
  expect_error([&] { make_optimizer({.name = "lamb", .beta2 = -0.1}, segs); }, "beta2");
  expect_error([&] { make_optimizer({.name = "sgd", .lr = -1}, segs); }, "lr");
  expect_error([&] { make_optimizer({.name = "adamw", .weight_decay = -0.1}, segs); },
               "weight_decay");
  expect_error([&] { make_optimizer({.name = "sgd", .momentum = -0.5}, segs); }, "momentum");
  expect_error(
      [&] {
        make_optimizer({.name = "sgd"}, {{"a", 0, 8, true}, {"b", 4, 8, true}});
      },
      "overlaps");
  expect_error([&] { make_optimizer({.name = "sgd"}, {{"a", 0, -1, true}}); }, "'a'");
  auto opt = make_optimizer({.name = "sgd"}, segs);
  float p[4] = {}, g[4] = {};
  Tensor pt = wrap(p, 4), short_p = wrap(p, 3), ints = Tensor::zeros(DataType::Int64, {4});
  expect_error([&] { opt->step(pt, wrap(g, 4), -0.1, 1); }, "learning rate");
  expect_error([&] { opt->step(pt, wrap(g, 4), std::nan(""), 1); }, "learning rate");
  expect_error([&] { opt->step(short_p, wrap(g, 4), 0.1, 1); }, "at least 4 elements");
  expect_error([&] { opt->step(pt, wrap(g, 3), 0.1, 1); }, "at least 4 elements");
  expect_error([&] { opt->step(ints, wrap(g, 4), 0.1, 1); }, "float32");
  EXPECT_EQ(opt->steps_taken(), 0);
}

TEST(OptimState, RoundTripContinuesBitIdentically) {
  for (const OptimizerConfig& config :
       {OptimizerConfig{.name = "sgd", .lr = 0.1, .momentum = 0.9, .nesterov = true},
        OptimizerConfig{.name = "adam", .weight_decay = 0.01},
        OptimizerConfig{.name = "adamw", .weight_decay = 0.01},
        OptimizerConfig{.name = "lamb", .weight_decay = 0.01}}) {
    FlatBuffer pa = make_params();
    const auto segs = segments_of(pa);
    fill_segments(pa.data(), segs, 7);
    std::vector<float> g(pa.size(), 0.f);
    auto a = make_optimizer(config, segs);
    for (int s = 0; s < 2; ++s) {
      fill_segments(g.data(), segs, 50 + s);
      Tensor p = pa.tensor();
      a->step(p, wrap(g), config.lr, 2);
    }
    // A fresh optimizer restored from a's state, on a copy of a's parameters.
    auto b = make_optimizer(config, segs);
    b->load_state(a->state());
    EXPECT_EQ(b->steps_taken(), 2);
    std::vector<float> pb(pa.data(), pa.data() + pa.size());
    Tensor ta = pa.tensor(), tb = wrap(pb);
    for (int s = 0; s < 3; ++s) {
      fill_segments(g.data(), segs, 80 + s);
      a->step(ta, wrap(g), config.lr, 2);
      b->step(tb, wrap(g), config.lr, 3);
    }
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), pb.size() * sizeof(float)), 0) << config.name;
    const auto sa = a->state(), sb = b->state();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].first, sb[i].first);
      EXPECT_EQ(std::memcmp(sa[i].second.raw(), sb[i].second.raw(), sa[i].second.nbytes()), 0)
          << config.name << " " << sa[i].first;
    }
  }
}

TEST(OptimState, StateNamesAndLoadErrors) {
  const std::vector<ParamSegment> segs{{"x", 0, 5, true}, {"y", 16, 3, false}};
  auto sgd = make_optimizer({.name = "sgd", .momentum = 0.9}, segs);
  auto names = [](const auto& st) {
    std::vector<std::string> n;
    for (const auto& e : st) n.push_back(e.first);
    return n;
  };
  EXPECT_EQ(names(sgd->state()), (std::vector<std::string>{"step", "momentum"}));
  EXPECT_EQ(names(make_optimizer({.name = "sgd"}, segs)->state()),
            (std::vector<std::string>{"step"}));
  auto adam = make_optimizer({.name = "adam"}, segs);
  auto st = adam->state();
  EXPECT_EQ(names(st), (std::vector<std::string>{"step", "m", "v"}));
  EXPECT_EQ(st[1].second.numel(), 19);  // span: last segment ends at 16 + 3

  auto without = [&](const std::string& drop) {
    std::vector<std::pair<std::string, Tensor>> s;
    for (const auto& e : st)
      if (e.first != drop) s.push_back(e);
    return s;
  };
  expect_error([&] { adam->load_state(without("v")); }, "'v' is missing");
  expect_error([&] { adam->load_state(without("step")); }, "'step' is missing");
  auto wrong_size = st;
  wrong_size[1].second = Tensor::zeros(DataType::Float, {18});
  expect_error([&] { adam->load_state(wrong_size); }, "'m'");
  auto wrong_dtype = st;
  wrong_dtype[0].second = Tensor::scalar<float>(1.f);
  expect_error([&] { adam->load_state(wrong_dtype); }, "'step'");
  auto extra = st;
  extra.emplace_back("momentum", Tensor::zeros(DataType::Float, {19}));
  expect_error([&] { adam->load_state(extra); }, "unknown entry 'momentum'");
  expect_error([&] { sgd->load_state(st); }, "unknown entry");
}

TEST(OptimThreads, ResultsDoNotDependOnThreadCount) {
  for (const char* name : {"adamw", "lamb", "sgd"}) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      FlatBuffer p = make_params();
      const auto segs = segments_of(p);
      fill_segments(p.data(), segs, 3);
      std::vector<float> g(p.size(), 0.f);
      auto opt = make_optimizer({.name = name, .momentum = 0.5, .weight_decay = 0.01}, segs);
      for (int s = 0; s < 3; ++s) {
        fill_segments(g.data(), segs, 30 + s);
        Tensor pt = p.tensor();
        opt->step(pt, wrap(g), 1e-2, threads);
      }
      results.emplace_back(p.data(), p.data() + p.size());
    }
    EXPECT_EQ(results[0], results[1]) << name;
    EXPECT_EQ(results[0], results[2]) << name;
  }
}

TEST(OptimSchedule, KeyStepsMatchClosedForms) {
  const double base = 0.1, lo = 0.01;
  LrSchedule constant{.kind = "constant", .warmup_steps = 4};
  EXPECT_DOUBLE_EQ(constant.lr_at(0, base), base * 1 / 4);
  EXPECT_DOUBLE_EQ(constant.lr_at(3, base), base);
  EXPECT_DOUBLE_EQ(constant.lr_at(1000, base), base);
  EXPECT_DOUBLE_EQ(LrSchedule{}.lr_at(0, base), base);

  LrSchedule linear{.kind = "linear", .warmup_steps = 10, .total_steps = 110, .min_lr = lo};
  EXPECT_DOUBLE_EQ(linear.lr_at(0, base), base / 10);
  EXPECT_DOUBLE_EQ(linear.lr_at(4, base), base * 5 / 10);
  EXPECT_DOUBLE_EQ(linear.lr_at(10, base), base);
  EXPECT_NEAR(linear.lr_at(60, base), lo + (base - lo) * 0.5, 1e-15);
  EXPECT_NEAR(linear.lr_at(85, base), lo + (base - lo) * 0.25, 1e-15);
  EXPECT_DOUBLE_EQ(linear.lr_at(110, base), lo);
  EXPECT_DOUBLE_EQ(linear.lr_at(500, base), lo);

  LrSchedule cosine{.kind = "Cosine", .warmup_steps = 10, .total_steps = 110, .min_lr = lo};
  EXPECT_DOUBLE_EQ(cosine.lr_at(9, base), base);
  EXPECT_DOUBLE_EQ(cosine.lr_at(10, base), base);
  EXPECT_NEAR(cosine.lr_at(35, base),
              lo + (base - lo) * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_NEAR(cosine.lr_at(60, base), lo + (base - lo) * 0.5, 1e-15);
  EXPECT_NEAR(cosine.lr_at(110, base), lo, 1e-15);
  EXPECT_NEAR(cosine.lr_at(111, base), lo, 1e-15);

  LrSchedule step{.kind = "step", .warmup_steps = 2, .step_size = 3, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(step.lr_at(0, base), base / 2);
  EXPECT_DOUBLE_EQ(step.lr_at(2, base), base);
  EXPECT_DOUBLE_EQ(step.lr_at(4, base), base);
  EXPECT_DOUBLE_EQ(step.lr_at(5, base), base * 0.5);
  EXPECT_DOUBLE_EQ(step.lr_at(11, base), base * 0.125);
}

TEST(OptimSchedule, BadSchedulesThrow) {
  expect_error([] { LrSchedule{.kind = "exp"}.lr_at(0, 0.1); }, "unknown kind 'exp'");
  expect_error(
      [] { LrSchedule{.kind = "linear", .warmup_steps = 5, .total_steps = 5}.lr_at(0, 1); },
      "total_steps");
  expect_error([] { LrSchedule{.kind = "cosine", .total_steps = 5, .min_lr = 2}.lr_at(0, 1); },
               "min_lr");
  expect_error([] { LrSchedule{.kind = "step", .step_size = 0}.lr_at(0, 1); }, "step_size");
  expect_error([] { LrSchedule{.kind = "step", .gamma = 0}.lr_at(0, 1); }, "gamma");
  expect_error([] { LrSchedule{}.lr_at(-1, 1); }, "step");
  expect_error([] { LrSchedule{.warmup_steps = -2}.lr_at(0, 1); }, "warmup_steps");
}

TEST(OptimClip, GlobalNormAndClipMatchFloat64) {
  const int64_t n = 100003;
  std::vector<float> g = random_floats(n, 11, -2.f, 2.f);
  double want = 0;
  for (float x : g) want += double(x) * double(x);
  want = std::sqrt(want);
  EXPECT_NEAR(global_norm(wrap(g), 2), want, 1e-12 * want);
  EXPECT_EQ(global_norm(wrap(g), 1), global_norm(wrap(g), 3));
  EXPECT_EQ(global_norm(wrap(g.data(), 0), 2), 0.0);

  // Above the limit: every element scaled by max / (norm + 1e-6), as PyTorch.
  const double max_norm = 10.0;
  std::vector<float> c = g;
  Tensor ct = wrap(c);
  EXPECT_NEAR(clip_by_global_norm(ct, max_norm, 2), want, 1e-12 * want);
  const double coef = max_norm / (want + 1e-6);
  for (int64_t i = 0; i < n; i += 997) EXPECT_NEAR(c[i], g[i] * coef, 1e-6 * std::fabs(g[i]));
  EXPECT_NEAR(global_norm(ct, 2), max_norm, 1e-5);

  // Below the limit, or no limit: untouched.
  std::copy(g.begin(), g.end(), c.begin());  // into the memory ct views
  clip_by_global_norm(ct, 2 * want, 2);
  EXPECT_EQ(c, g);
  clip_by_global_norm(ct, 0.0, 2);
  EXPECT_EQ(c, g);
}

TEST(OptimClip, NonFiniteDetection) {
  const int64_t n = 50000;
  std::vector<float> g = random_floats(n, 5);
  EXPECT_FALSE(has_non_finite(wrap(g), 2));
  g[n - 1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(has_non_finite(wrap(g), 2));
  g[n - 1] = 0;
  g[20000] = std::nanf("");
  EXPECT_TRUE(has_non_finite(wrap(g), 2));
  // A NaN norm leaves the gradient alone for the caller to skip the step.
  std::vector<float> c = g;
  Tensor ct = wrap(c);
  EXPECT_TRUE(std::isnan(clip_by_global_norm(ct, 1.0, 2)));
  EXPECT_EQ(std::memcmp(c.data(), g.data(), n * sizeof(float)), 0);
  g[20000] = -std::numeric_limits<float>::max();
  EXPECT_FALSE(has_non_finite(wrap(g), 2));
  expect_error([] { global_norm(Tensor::zeros(DataType::Int32, {5}), 1); }, "float32");
}

TEST(OptimAccumulate, AccumulateAndScaleMatchFloat64) {
  const int64_t n = 70001;
  std::vector<float> acc(n, 0.f);
  std::vector<double> want(n, 0.0);
  for (uint32_t mb = 0; mb < 3; ++mb) {
    std::vector<float> g = random_floats(n, 40 + mb);
    Tensor at = wrap(acc);
    accumulate_grads(at, wrap(g), 2);
    for (int64_t i = 0; i < n; ++i) want[i] += g[i];
  }
  Tensor at = wrap(acc);
  scale_grads(at, 1.0 / 3, 2);
  for (int64_t i = 0; i < n; i += 101) EXPECT_NEAR(acc[i], want[i] / 3, 1e-6);
  std::vector<float> three(3);
  expect_error([&] { accumulate_grads(at, wrap(three), 1); }, "70001 elements but g has 3");
}

/// Host memory tagged as cuda:0, so a dispatch that ignored the device would read it happily.
Tensor cuda_tagged(std::vector<float>& v) {
  return Tensor(DataType::Float, {static_cast<int64_t>(v.size())},
                std::make_shared<Storage>(v.data(), v.size() * sizeof(float),
                                          Device{DeviceType::CUDA, 0}, nullptr));
}

// The optimizer kernels dispatch on the buffers' device: until a CUDA implementation registers,
// CUDA buffers are refused with a clear error before anything is read, written or counted.
TEST(OptimDevice, CudaBuffersAreRefusedWithoutCudaOptimizerKernels) {
  const std::string msg = "buffers on cuda:0: this build has no optimizer kernels for that device";
  EXPECT_TRUE(optimizer_kernels::has_kernels(Device{}));
  EXPECT_FALSE(optimizer_kernels::has_kernels(Device{DeviceType::CUDA, 0}));
  std::vector<float> p(40, 1.f), g(40, 0.5f), host(40, 2.f);
  const std::vector<float> p0 = p, g0 = g;
  Tensor cp = cuda_tagged(p), cg = cuda_tagged(g), h = wrap(host);
  const std::vector<ParamSegment> segs{{"x", 0, 20, true}, {"y", 32, 8, false}};
  for (const char* name : {"sgd", "adamw", "lamb"}) {
    auto opt = make_optimizer({.name = name, .momentum = 0.9}, segs);
    expect_error([&] { opt->step(cp, cg, 0.1, 2); }, std::string(name) + " step: " + msg);
    EXPECT_EQ(opt->steps_taken(), 0) << name;
    for (const auto& [entry, t] : opt->state())
      EXPECT_EQ(t.device().type, DeviceType::CPU) << name << " " << entry;
  }
  auto sgd = make_optimizer({.name = "sgd"}, segs);
  expect_error([&] { sgd->step(h, cg, 0.1, 2); }, "params are on cpu but grads on cuda:0");
  expect_error([&] { global_norm(cg, 2); }, msg);
  expect_error([&] { clip_by_global_norm(cg, 1.0, 2); }, msg);
  expect_error([&] { clip_to_norm(cg, 10.0, 1.0, 2); }, msg);
  expect_error([&] { has_non_finite(cg, 2); }, msg);
  expect_error([&] { copy_sum_squares(cp, cg, 2); }, msg);
  expect_error([&] { accumulate_grads(cp, cg, 2); }, msg);
  expect_error([&] { scale_grads(cg, 0.5, 2); }, msg);
  expect_error([&] { LossScaler().unscale(cg, 1.0, 2); }, msg);
  expect_error([&] { optimizer_kernels::sum_squares(cg, 1); }, "[optimizer] sum_squares: " + msg);
  expect_error([&] { accumulate_grads(h, cg, 2); }, "g is on cuda:0 but acc is on cpu");
  EXPECT_EQ(p, p0);
  EXPECT_EQ(g, g0);
}

TEST(OptimFlatBuffer, AlignedViewsShareOneAllocation) {
  FlatBuffer fb({{"a", {3, 5}}, {"b", {1}}, {"c", {}}, {"d", {0}}, {"e", {17}}});
  const auto& s = fb.segments();
  ASSERT_EQ(s.size(), 5u);
  const int64_t want_offsets[] = {0, 16, 32, 48, 48};
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(s[i].offset, want_offsets[i]) << s[i].name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(fb.data() + s[i].offset) % 64, 0u) << s[i].name;
  }
  EXPECT_EQ(s[0].size, 15);
  EXPECT_EQ(s[2].size, 1);  // a scalar
  EXPECT_EQ(s[3].size, 0);
  EXPECT_EQ(fb.size(), 80);
  Tensor a = fb.view("a");
  EXPECT_EQ(a.shape(), (Shape{3, 5}));
  EXPECT_EQ(a.data<float>(), fb.data());
  a.data<float>()[14] = 4.f;
  fb.view(4).data<float>()[16] = 7.f;
  EXPECT_EQ(fb.data()[14], 4.f);
  EXPECT_EQ(fb.data()[48 + 16], 7.f);
  EXPECT_EQ(fb.view("e").shape(), (Shape{17}));
  EXPECT_EQ(fb.view("c").shape(), Shape{});
  const float* before = fb.data();
  fb.zero(2);
  EXPECT_EQ(fb.data(), before);
  EXPECT_EQ(fb.view("a").data<float>()[14], 0.f);
  EXPECT_EQ(fb.data()[64], 0.f);
  expect_error([&] { fb.view("zz"); }, "'zz'");
  expect_error([&] { fb.view(5); }, "out of range");
  expect_error([] { FlatBuffer({{"a", {2}}, {"a", {3}}}); }, "twice");
  expect_error([] { FlatBuffer({{"a", {2, -1}}}); }, "dims");
}

}  // namespace
}  // namespace onyx::optim
