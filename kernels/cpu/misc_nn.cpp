// Assorted neural-network ops: LRN, Swish, SwiGLU, CumProd, Det, and the random generators
// Bernoulli, RandomUniform(Like), RandomNormal(Like). Generators keep one engine per kernel
// (seeded by the `seed` attribute, else randomly) behind a mutex, so successive runs differ
// but a seeded session reproduces its sequence.
#include <climits>
#include <cmath>
#include <mutex>
#include <random>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_plan.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int64_t kGrain = 16384;

/// Swish (x * sigmoid(alpha x)) and SwiGLU (Swish(A) * B, equal shapes).
class SwishKernel final : public Kernel {
 public:
  SwishKernel(const KernelInfo& info, bool gated)
      : gated_(gated), alpha_(info.node.attr_float("alpha", 1.0f)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& a = ctx.required_input(0);
    const Tensor* g = gated_ ? &ctx.required_input(1) : nullptr;
    if (g)
      ONYX_CHECK(g->dtype() == a.dtype() && g->shape() == a.shape(),
                 "[{}] A and B should have one dtype and shape (no broadcasting) but are {} {} "
                 "and {} {}",
                 ctx.label(), dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(g->dtype()),
                 shape_str(g->shape()));
    Tensor& y = ctx.allocate_output(0, a.dtype(), a.shape());
    dispatch<FloatTypes>(a.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* ap = a.data<T>();
      const T* bp = g ? g->data<T>() : nullptr;
      T* yp = y.data<T>();
      const A alpha = A(alpha_);
      parallel_for(a.numel(), ctx.threads(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const A v = static_cast<A>(ap[i]);
          // The sigmoid is rounded to T before the product, as the reference does.
          const A sig = static_cast<A>(static_cast<T>(A(1) / (A(1) + std::exp(-alpha * v))));
          A r = static_cast<A>(static_cast<T>(v * sig));
          if (bp) r *= static_cast<A>(bp[i]);
          yp[i] = static_cast<T>(r);
        }
      });
    });
  }

 private:
  bool gated_;
  float alpha_;
};

using CumProdTypes =
    TypeList<float, double, float16, bfloat16, int32_t, int64_t, uint32_t, uint64_t>;

class CumProdKernel final : public Kernel {
 public:
  explicit CumProdKernel(const KernelInfo& info)
      : exclusive_(info.node.attr_int("exclusive", 0) != 0),
        reverse_(info.node.attr_int("reverse", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 1, "[{}] input should have rank >= 1 but is a scalar", ctx.label());
    const int64_t axis = normalize_axis(scalar_int_input(ctx, 1, "axis"), x.rank(), ctx.label());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    const AxisSplit s = split_at_axis(x.shape(), axis);
    dispatch<CumProdTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      const int64_t n = s.axis, inner = s.inner;
      parallel_for(s.outer, ctx.threads(), std::max<int64_t>(1, kGrain / (n * inner)),
                   [&](int64_t b, int64_t e) {
                     std::vector<A> acc(inner);
                     for (int64_t o = b; o < e; ++o) {
                       std::fill(acc.begin(), acc.end(), A(1));
                       for (int64_t i = 0; i < n; ++i) {
                         const int64_t r = reverse_ ? n - 1 - i : i;
                         const T* src = xp + (o * n + r) * inner;
                         T* dst = yp + (o * n + r) * inner;
                         for (int64_t j = 0; j < inner; ++j) {
                           if (exclusive_) {
                             dst[j] = static_cast<T>(acc[j]);
                             acc[j] *= static_cast<A>(src[j]);
                           } else {
                             acc[j] *= static_cast<A>(src[j]);
                             dst[j] = static_cast<T>(acc[j]);
                           }
                         }
                       }
                     }
                   });
    });
  }

 private:
  bool exclusive_, reverse_;
};

/// Det: LU decomposition with partial pivoting in double for each trailing [M, M] matrix.
void det_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  ONYX_CHECK(x.rank() >= 2 && x.dim(-1) == x.dim(-2), "[{}] input should be [..., M, M] but is {}",
             ctx.label(), shape_str(x.shape()));
  const int64_t M = x.dim(-1);
  Shape out_shape(x.shape().begin(), x.shape().end() - 2);
  Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
  dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(y.numel(), ctx.threads(), 1, [&](int64_t b, int64_t e) {
      std::vector<double> a(M * M);
      for (int64_t m = b; m < e; ++m) {
        for (int64_t i = 0; i < M * M; ++i) a[i] = static_cast<double>(xp[m * M * M + i]);
        double det = 1.0;
        for (int64_t k = 0; k < M && det != 0.0; ++k) {
          int64_t p = k;
          for (int64_t i = k + 1; i < M; ++i)
            if (std::abs(a[i * M + k]) > std::abs(a[p * M + k])) p = i;
          if (a[p * M + k] == 0.0) {
            det = 0.0;
            break;
          }
          if (p != k) {
            for (int64_t j = 0; j < M; ++j) std::swap(a[k * M + j], a[p * M + j]);
            det = -det;
          }
          det *= a[k * M + k];
          for (int64_t i = k + 1; i < M; ++i) {
            const double f = a[i * M + k] / a[k * M + k];
            for (int64_t j = k + 1; j < M; ++j) a[i * M + j] -= f * a[k * M + j];
          }
        }
        yp[m] = static_cast<T>(det);
      }
    });
  });
}

/// Shared engine of a random op: seeded once, used under a lock.
class RandomSource {
 public:
  explicit RandomSource(const Node& node) {
    if (node.has_attr("seed")) {
      // A float attribute: converting one outside int64's range is undefined behaviour (found by
      // tests/fuzz/fuzz_model.cpp with seed -2.7e36), so it is the model's error.
      const double seed = node.attr_float("seed", 0.f);
      ONYX_CHECK(std::isfinite(seed) && seed >= -9.2e18 && seed <= 9.2e18,
                 "[{}] attribute 'seed' holds {}, outside the integers [-9.2e18, 9.2e18] a seed can be", node.label(),
                 seed);
      engine_.seed(static_cast<uint64_t>(static_cast<int64_t>(seed)));
    } else {
      std::random_device rd;
      engine_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
    }
  }
  /// n draws of `dist` in double, in one locked pass.
  template <typename Dist>
  std::vector<double> draw(int64_t n, Dist dist) const {
    std::vector<double> v(n);
    std::lock_guard<std::mutex> lock(mu_);
    for (double& x : v) x = dist(engine_);
    return v;
  }

 private:
  mutable std::mutex mu_;
  mutable std::mt19937_64 engine_;
};

/// Writes doubles into a tensor of any numeric or bool dtype.
void store_doubles(const std::vector<double>& v, Tensor& t, const std::string& who) {
  dispatch<NumericBoolTypes>(t.dtype(), who, [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bool>)
        p[i] = v[i] != 0.0;
      else
        p[i] = static_cast<T>(static_cast<acc_t<T>>(v[i]));
    }
  });
}

class BernoulliKernel final : public Kernel {
 public:
  explicit BernoulliKernel(const KernelInfo& info)
      : rng_(info.node), dtype_(static_cast<DataType>(info.node.attr_int("dtype", 0))) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& p = ctx.required_input(0);
    const DataType out = dtype_ == DataType::Undefined ? p.dtype() : dtype_;
    Tensor& y = ctx.allocate_output(0, out, p.shape());
    std::vector<double> u = rng_.draw(p.numel(), std::uniform_real_distribution<double>(0.0, 1.0));
    const std::vector<double> prob = p.to_double_vector();
    for (size_t i = 0; i < u.size(); ++i) {
      ONYX_CHECK(prob[i] >= 0.0 && prob[i] <= 1.0, "[{}] probability {} is outside [0, 1]",
                 ctx.label(), prob[i]);
      u[i] = u[i] < prob[i] ? 1.0 : 0.0;
    }
    store_doubles(u, y, ctx.label());
  }

 private:
  RandomSource rng_;
  DataType dtype_;
};

/// RandomUniform(Like) and RandomNormal(Like): shape from the attribute or from the input.
class RandomKernel final : public Kernel {
 public:
  RandomKernel(const KernelInfo& info, bool normal, bool like)
      : rng_(info.node),
        normal_(normal),
        like_(like),
        dtype_(static_cast<DataType>(info.node.attr_int("dtype", like ? 0 : 1))),
        a_(info.node.attr_float(normal ? "mean" : "low", 0.f)),
        b_(info.node.attr_float(normal ? "scale" : "high", 1.f)),
        shape_(like ? Shape{} : info.node.attr_ints("shape", {})) {
    ONYX_CHECK(dtype_ == DataType::Undefined || is_float(dtype_),
               "[{}] dtype should be a float type but is {}", info.label(),
               static_cast<int>(dtype_));
  }

  void compute(KernelContext& ctx) const override {
    DataType out = dtype_;
    Shape shape = shape_;
    if (like_) {
      const Tensor& x = ctx.required_input(0);
      shape = x.shape();
      if (out == DataType::Undefined) out = x.dtype();
      ONYX_CHECK(is_float(out), "[{}] output dtype should be a float type but is {}; set dtype",
                 ctx.label(), dtype_name(out));
    }
    Tensor& y = ctx.allocate_output(0, out, shape);
    const std::vector<double> v =
        normal_ ? rng_.draw(y.numel(), std::normal_distribution<double>(a_, b_))
                : rng_.draw(y.numel(), std::uniform_real_distribution<double>(a_, b_));
    store_doubles(v, y, ctx.label());
  }

 private:
  RandomSource rng_;
  bool normal_, like_;
  DataType dtype_;
  double a_, b_;
  Shape shape_;
};

}  // namespace

void register_misc_nn_kernels(KernelRegistry& r) {
  r.add({"Swish", "", 24, INT_MAX, "cpu", 0, float_types(),
         [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
           return std::make_unique<SwishKernel>(info, false);
         }});
  r.add({"SwiGLU", "", 28, INT_MAX, "cpu", 0, float_types(),
         [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
           return std::make_unique<SwishKernel>(info, true);
         }});
  r.add({"CumProd",
         "",
         26,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16, DataType::Int32,
          DataType::Int64, DataType::UInt32, DataType::UInt64},
         make_factory<CumProdKernel>()});
  r.add({"Det", "", 11, INT_MAX, "cpu", 0, float_types(), function_factory(det_compute)});
  r.add({"Bernoulli", "", 15, INT_MAX, "cpu", 0, float_types(), make_factory<BernoulliKernel>()});
  const std::tuple<const char*, bool, bool> randoms[] = {{"RandomUniform", false, false},
                                                         {"RandomNormal", true, false},
                                                         {"RandomUniformLike", false, true},
                                                         {"RandomNormalLike", true, true}};
  for (const auto& [op, normal, like] : randoms)
    r.add({op,
           "",
           1,
           INT_MAX,
           "cpu",
           like ? 0 : -1,
           {},
           [normal = normal, like = like](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<RandomKernel>(info, normal, like);
           }});
}

}  // namespace onyx::cpu
