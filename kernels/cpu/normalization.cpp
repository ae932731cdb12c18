// BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization,
// RMSNormalization, LRN. These are memory-bound: one statistics pass and one affine pass over
// contiguous rows, vectorised and parallel, for every float dtype (statistics in double).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/norm_attrs.h"
#include "kernels/cpu/half_convert.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

bool is_float_dtype(DataType dt) {
  return dt == DataType::Float || dt == DataType::Double || dt == DataType::Float16 ||
         dt == DataType::BFloat16;
}

/// s plus the sum of x[i] (or of (x[i] - shift)^2 when `squares`) over n values, in double
/// over 8 independent lanes combined in a fixed order: deterministic, and the adds vectorise
/// (a single running sum is a chain of dependent adds, 4x slower on a large batch).
template <typename T>
double sum_double(const T* x, int64_t n, bool squares = false, double shift = 0.0,
                  double s = 0.0) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  read_blocks(x, n, [&](const acc_t<T>* v, int64_t, int64_t m) {
    int64_t i = 0;
    if (squares) {
      for (; i + kLanes <= m; i += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const double d = static_cast<double>(v[i + l]) - shift;
          lane[l] += d * d;
        }
      for (; i < m; ++i) {
        const double d = static_cast<double>(v[i]) - shift;
        lane[0] += d * d;
      }
    } else {
      for (; i + kLanes <= m; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(v[i + l]);
      for (; i < m; ++i) lane[0] += static_cast<double>(v[i]);
    }
  });
  for (double l : lane) s += l;
  return s;
}

/// Mean and biased variance of n values (two passes, double accumulation).
template <typename T>
std::pair<double, double> moments(const T* x, int64_t n) {
  double mean = n ? sum_double(x, n) / n : 0.0;
  double v = sum_double(x, n, true, mean);
  return {mean, n ? v / n : 0.0};
}

/// y[i] = x[i] * a + b over n values, computed in acc_t<T>.
template <typename T>
void affine(const T* x, T* y, int64_t n, double a, double b) {
  using Acc = acc_t<T>;
  Acc av = static_cast<Acc>(a), bv = static_cast<Acc>(b);
  map_blocks(x, y, n, [&](const Acc* in, Acc* out, int64_t, int64_t m) {
    for (int64_t i = 0; i < m; ++i) out[i] = in[i] * av + bv;
  });
}

/// `p`'s values broadcast (numpy rules, right-aligned) to `target`, as doubles.
std::vector<double> expand_to(KernelContext& ctx, const Tensor& p, const Shape& target,
                              const char* name) {
  std::vector<double> v = p.to_double_vector();
  int64_t n = shape_numel(target);
  if (static_cast<int64_t>(v.size()) == n) return v;
  const Shape& ps = p.shape();
  ONYX_CHECK(ps.size() <= target.size(), "[{}] {} of shape {} does not broadcast to {}",
             ctx.label(), name, shape_str(ps), shape_str(target));
  size_t off = target.size() - ps.size();
  for (size_t i = 0; i < ps.size(); ++i)
    ONYX_CHECK(ps[i] == 1 || ps[i] == target[off + i],
               "[{}] {} of shape {} does not broadcast to {}", ctx.label(), name, shape_str(ps),
               shape_str(target));
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, src = 0, stride = 1;
    for (int64_t d = static_cast<int64_t>(target.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % target[d];
      rem /= target[d];
      int64_t pd = d - static_cast<int64_t>(off);
      if (pd >= 0) {
        if (ps[pd] != 1) src += idx * stride;
        stride *= ps[pd];
      }
    }
    out[i] = v[src];
  }
  return out;
}

/// Per-channel parameter vector of C values (or C * inner for BatchNormalization spatial=0).
std::vector<double> channel_param(KernelContext& ctx, const Tensor& p, int64_t C, int64_t inner,
                                  const char* name) {
  ONYX_CHECK(is_float_dtype(p.dtype()), "[{}] {} must be a float tensor, got {}", ctx.label(), name,
             dtype_name(p.dtype()));
  ONYX_CHECK(p.numel() == C || p.numel() == C * inner,
             "[{}] {} must hold {} values (one per channel), got shape {}", ctx.label(), name, C,
             shape_str(p.shape()));
  return p.to_double_vector();
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info)
      : eps_(info.node.attr_float("epsilon", 1e-5f)),
        momentum_(info.node.attr_float("momentum", 0.9f)),
        training_attr_(info.node.attr_int("training_mode", 0) != 0),
        opset_(info.opset) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    ONYX_CHECK(X.rank() >= 1 && is_float_dtype(X.dtype()),
               "[{}] X must be a float tensor of rank >= 1, got {} {}", ctx.label(),
               dtype_name(X.dtype()), shape_str(X.shape()));
    int64_t N = X.dim(0), C = X.rank() > 1 ? X.dim(1) : 1;
    int64_t S = X.numel() / std::max<int64_t>(N * C, 1);
    const Tensor& mean_t = ctx.required_input(3);
    const Tensor& var_t = ctx.required_input(4);
    auto scale = channel_param(ctx, ctx.required_input(1), C, S, "scale");
    auto bias = channel_param(ctx, ctx.required_input(2), C, S, "B");
    auto mean = channel_param(ctx, mean_t, C, S, "input_mean");
    auto var = channel_param(ctx, var_t, C, S, "input_var");
    // Older opsets train when the statistics outputs are asked for.
    bool training = opset_ >= 14 ? training_attr_ : ctx.num_outputs() > 1 && ctx.output_wanted(1);
    bool per_elem = scale.size() == static_cast<size_t>(C * S) && S > 1;
    ONYX_CHECK(!training || !per_elem, "[{}] training with per-element statistics is not supported",
               ctx.label());
    if (training) {
      std::vector<double> bm(C), bv(C);
      dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
        const T* x = X.data<T>();
        parallel_for(C, ctx.threads(), 1, [&](int64_t b, int64_t e) {
          for (int64_t c = b; c < e; ++c) {
            double s = 0, s2 = 0, cnt = static_cast<double>(N * S);
            for (int64_t n = 0; n < N; ++n) s = sum_double(x + (n * C + c) * S, S, false, 0, s);
            double m = cnt > 0 ? s / cnt : 0.0;
            for (int64_t n = 0; n < N; ++n) s2 = sum_double(x + (n * C + c) * S, S, true, m, s2);
            bm[c] = m;
            bv[c] = cnt > 0 ? s2 / cnt : 0.0;
          }
        });
      });
      for (int o = 1; o <= 4 && o < ctx.num_outputs(); ++o) {
        if (!ctx.output_wanted(o)) continue;
        const Tensor& like = o == 2 || o == 4 ? var_t : mean_t;
        Tensor& t = ctx.allocate_output(o, like.dtype(), {C});
        const auto& cur = o == 1 || o == 3 ? bm : bv;
        const auto& run = o == 1 ? mean : var;
        dispatch<FloatTypes>(t.dtype(), ctx.label(), [&]<typename U>() {
          U* d = t.data<U>();
          for (int64_t c = 0; c < C; ++c)
            d[c] =
                static_cast<U>(o >= 3 ? cur[c] : run[c] * momentum_ + cur[c] * (1.0 - momentum_));
        });
      }
      mean = bm;
      var = bv;
    }
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      parallel_for(N * C, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(S, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t nc = b; nc < e; ++nc) {
                       int64_t c = nc % C;
                       if (per_elem) {
                         using Acc = acc_t<T>;
                         map_blocks(x + nc * S, y + nc * S, S,
                                    [&](const Acc* in, Acc* out, int64_t i0, int64_t m) {
                                      for (int64_t i = 0; i < m; ++i) {
                                        int64_t j = c * S + i0 + i;
                                        double a = scale[j] / std::sqrt(var[j] + eps_);
                                        out[i] = static_cast<Acc>(
                                            (double(in[i]) - mean[j]) * a + bias[j]);
                                      }
                                    });
                         continue;
                       }
                       double a = scale[c] / std::sqrt(var[c] + eps_);
                       affine(x + nc * S, y + nc * S, S, a, bias[c] - mean[c] * a);
                     }
                   });
    });
  }

 private:
  double eps_, momentum_;
  bool training_attr_;
  int64_t opset_;
};

/// GroupNormalization (and InstanceNormalization as one group per channel): statistics
/// over each (image, group) block, then a per-channel affine.
void group_norm(KernelContext& ctx, int64_t groups, double eps, bool instance) {
  const Tensor& X = ctx.required_input(0);
  ONYX_CHECK(X.rank() >= 2 && is_float_dtype(X.dtype()),
             "[{}] X must be a float tensor [N, C, ...], got {} {}", ctx.label(),
             dtype_name(X.dtype()), shape_str(X.shape()));
  int64_t N = X.dim(0), C = X.dim(1), S = X.numel() / std::max<int64_t>(N * C, 1);
  int64_t G = instance ? C : groups;
  ONYX_CHECK(G >= 1 && C % G == 0, "[{}] num_groups {} does not divide the {} channels",
             ctx.label(), G, C);
  const Tensor& st = ctx.required_input(1);
  const Tensor& bt = ctx.required_input(2);
  int64_t Cg = C / G;
  // Scale and bias hold one value per channel, or per group (GroupNormalization-18).
  for (const Tensor* p : {&st, &bt})
    ONYX_CHECK(p->numel() == C || (!instance && p->numel() == G),
               "[{}] scale and bias must hold {} values (one per channel), got shape {}",
               ctx.label(), C, shape_str(p->shape()));
  auto scale = st.to_double_vector(), bias = bt.to_double_vector();
  Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
  dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    parallel_for(N * G, ctx.threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        int64_t off = ng * Cg * S, g = ng % G;
        auto [mean, var] = moments(x + off, Cg * S);
        double inv = 1.0 / std::sqrt(var + eps);
        for (int64_t ci = 0; ci < Cg; ++ci) {
          int64_t c = g * Cg + ci, pi = static_cast<int64_t>(scale.size()) == C ? c : g;
          double a = scale[pi] * inv;
          affine(x + off + ci * S, y + off + ci * S, S, a, bias[pi] - mean * a);
        }
      }
    });
  });
}

class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(const KernelInfo& info, bool instance)
      : eps_(info.node.attr_float("epsilon", 1e-5f)),
        groups_(instance ? 0 : info.node.require_attr("num_groups", Attribute::Type::Int).i),
        instance_(instance) {}
  void compute(KernelContext& ctx) const override { group_norm(ctx, groups_, eps_, instance_); }

 private:
  double eps_;
  int64_t groups_;
  bool instance_;
};

/// LayerNormalization and RMSNormalization: each row of X.shape[axis:] is normalised.
class RowNormKernel final : public Kernel {
 public:
  RowNormKernel(const KernelInfo& info, bool rms) : attrs_(info, rms) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& scale_t = ctx.required_input(1);
    const Tensor* bias_t = attrs_.rms ? nullptr : ctx.input(2);
    int64_t r = X.rank();
    int64_t axis = attrs_.axis_of(ctx, X);
    ONYX_CHECK(is_float_dtype(X.dtype()), "[{}] X must be a float tensor, got {}", ctx.label(),
               dtype_name(X.dtype()));
    Shape inner_shape(X.shape().begin() + axis, X.shape().end());
    int64_t inner = shape_numel(inner_shape), outer = inner ? X.numel() / inner : 0;
    auto scale = expand_to(ctx, scale_t, inner_shape, "scale");
    auto bias = bias_t ? expand_to(ctx, *bias_t, inner_shape, "B") : std::vector<double>();
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    Shape stat_shape(X.shape().begin(), X.shape().begin() + axis);
    stat_shape.resize(r, 1);
    DataType sdt = is_float_dtype(attrs_.stash) ? attrs_.stash : DataType::Float;
    Tensor* mean_out = !attrs_.rms && ctx.num_outputs() > 1 && ctx.output_wanted(1)
                           ? &ctx.allocate_output(1, sdt, stat_shape)
                           : nullptr;
    Tensor* inv_out = !attrs_.rms && ctx.num_outputs() > 2 && ctx.output_wanted(2)
                          ? &ctx.allocate_output(2, sdt, stat_shape)
                          : nullptr;
    std::vector<double> means(outer), invs(outer);
    dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
      using Acc = acc_t<T>;
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      std::vector<Acc> sc(scale.begin(), scale.end()), bi(bias.begin(), bias.end());
      parallel_for(outer, ctx.threads(), std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t o = b; o < e; ++o) {
                       const T* xr = x + o * inner;
                       T* yr = y + o * inner;
                       double mean = 0, var = 0;
                       if (attrs_.rms) {
                         var = sum_double(xr, inner, true) / inner;
                       } else {
                         std::tie(mean, var) = moments(xr, inner);
                       }
                       double inv = 1.0 / std::sqrt(var + attrs_.epsilon);
                       means[o] = mean;
                       invs[o] = inv;
                       Acc m = static_cast<Acc>(mean), iv = static_cast<Acc>(inv);
                       map_blocks(xr, yr, inner, [&](const Acc* in, Acc* out, int64_t i0,
                                                     int64_t len) {
                         const Acc* s = sc.data() + i0;
                         if (bi.empty()) {
                           for (int64_t i = 0; i < len; ++i) out[i] = (in[i] - m) * iv * s[i];
                         } else {
                           const Acc* bb = bi.data() + i0;
                           for (int64_t i = 0; i < len; ++i)
                             out[i] = (in[i] - m) * iv * s[i] + bb[i];
                         }
                       });
                     }
                   });
    });
    for (auto out_and_stats : {std::pair{mean_out, &means}, std::pair{inv_out, &invs}}) {
      auto* t = out_and_stats.first;  // not a structured binding: clang 14 cannot capture those
      auto* v = out_and_stats.second;
      if (!t) continue;
      dispatch<FloatTypes>(t->dtype(), ctx.label(), [&]<typename U>() {
        U* d = t->data<U>();
        for (int64_t o = 0; o < outer; ++o) d[o] = static_cast<U>((*v)[o]);
      });
    }
  }

 private:
  RowNormAttrs attrs_;
};

/// LRN: y = x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta.
class LrnKernel final : public Kernel {
 public:
  explicit LrnKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 1e-4f)),
        beta_(info.node.attr_float("beta", 0.75f)),
        bias_(info.node.attr_float("bias", 1.0f)),
        size_(info.node.require_attr("size", Attribute::Type::Int).i) {
    ONYX_CHECK(size_ >= 1, "[{}] size must be >= 1, got {}", info.label(), size_);
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    ONYX_CHECK(X.rank() >= 2, "[{}] X must be [N, C, ...], got shape {}", ctx.label(),
               shape_str(X.shape()));
    int64_t N = X.dim(0), C = X.dim(1), S = X.numel() / std::max<int64_t>(N * C, 1);
    int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
    Tensor& Y = ctx.allocate_output(0, X.dtype(), X.shape());
    dispatch<FloatTypes>(X.dtype(), ctx.label(), [&]<typename T>() {
      using Acc = acc_t<T>;
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      Acc scale = static_cast<Acc>(alpha_ / size_);
      parallel_for(N * C, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        std::vector<Acc> sq(S);
        for (int64_t nc = b; nc < e; ++nc) {
          int64_t n = nc / C, c = nc % C;
          std::fill(sq.begin(), sq.end(), Acc(0));
          for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min(C - 1, c + hi); ++k) {
            read_blocks(x + (n * C + k) * S, S, [&](const Acc* v, int64_t i0, int64_t m) {
              for (int64_t i = 0; i < m; ++i) sq[i0 + i] += v[i] * v[i];
            });
          }
          auto lrn = [&](const Acc* in, Acc* out, int64_t i0, int64_t m) {
            for (int64_t i = 0; i < m; ++i)
              out[i] = in[i] / std::pow(static_cast<Acc>(bias_) + scale * sq[i0 + i],
                                        static_cast<Acc>(beta_));
          };
          map_blocks(x + nc * S, y + nc * S, S, lrn);
        }
      });
    });
  }

 private:
  double alpha_, beta_, bias_;
  int64_t size_;
};

template <typename K, bool kFlag>
KernelFactory flag_factory() {
  return
      [](const KernelInfo& i) -> std::unique_ptr<Kernel> { return std::make_unique<K>(i, kFlag); };
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  r.add({.op_type = "BatchNormalization",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = make_factory<BatchNormKernel>()});
  r.add({.op_type = "InstanceNormalization",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = flag_factory<GroupNormKernel, true>()});
  r.add({.op_type = "GroupNormalization",
         .domain = "",
         .since = 18,
         .types = float_types(),
         .create = flag_factory<GroupNormKernel, false>()});
  r.add({.op_type = "LayerNormalization",
         .domain = "",
         .since = 17,
         .types = float_types(),
         .create = flag_factory<RowNormKernel, false>()});
  r.add({.op_type = "LRN",
         .domain = "",
         .since = 1,
         .types = float_types(),
         .create = make_factory<LrnKernel>()});
  r.add({.op_type = "RMSNormalization",
         .domain = "",
         .since = 23,
         .types = float_types(),
         .create = flag_factory<RowNormKernel, true>()});
}

}  // namespace onyx::cpu
