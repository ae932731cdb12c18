// ai.onnx.preview.training optimizer ops: Adagrad, Momentum (standard and nesterov) and Adam.
// Inputs are R (learning rate scalar), T (int64 update count scalar), then k groups of n
// tensors: [X_1..X_n, G_1..G_n, S_1..S_n, ...] where S are optimizer states; outputs are the
// new X and the new states, group by group. Per-element math is kernels/cpu/optimizer_math.h.
#include <climits>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optimizer_math.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using TrainingTypes = TypeList<float, double>;
constexpr int64_t kGrain = 16384;

/// Parsed inputs of one run: learning rate, update count, and the n optimized tensors with
/// their gradients and states, plus where each output goes.
struct TrainingArgs {
  double r = 0;
  int64_t t = 0;
  int64_t n = 0;                  // number of optimized tensors
  std::vector<const Tensor*> in;  // groups * n inputs after R and T
  std::vector<Tensor> out;        // (groups - 1) * n outputs
};

/// Reads R and T, checks the variadic inputs come in `groups` groups of matching tensors, and
/// allocates the (groups - 1) * n outputs (scratch where an output is not wanted).
TrainingArgs parse_training_inputs(KernelContext& ctx, int groups, const char* group_names) {
  const std::string who = ctx.label();
  TrainingArgs a;
  const Tensor& R = ctx.required_input(0);
  const Tensor& T = ctx.required_input(1);
  ONYX_CHECK(R.numel() == 1 && (R.dtype() == DataType::Float || R.dtype() == DataType::Double),
             "[{}] input R should be a float or double scalar but is {} {}", who,
             dtype_name(R.dtype()), shape_str(R.shape()));
  ONYX_CHECK(T.numel() == 1 && T.dtype() == DataType::Int64,
             "[{}] input T should be an int64 scalar but is {} {}", who, dtype_name(T.dtype()),
             shape_str(T.shape()));
  a.r = R.to_double_vector()[0];
  a.t = T.data<int64_t>()[0];
  const int variadic = ctx.num_inputs() - 2;
  ONYX_CHECK(variadic > 0 && variadic % groups == 0,
             "[{}] inputs after R and T should be {} groups of equal size ({}) but there are {}",
             who, groups, group_names, variadic);
  a.n = variadic / groups;
  ONYX_CHECK(ctx.num_outputs() == (groups - 1) * a.n,
             "[{}] {} optimized tensors need {} outputs but the node has {}", who, a.n,
             (groups - 1) * a.n, ctx.num_outputs());
  for (int i = 0; i < variadic; ++i) a.in.push_back(&ctx.required_input(2 + i));
  for (int64_t j = 0; j < a.n; ++j) {
    const Tensor& x = *a.in[j];
    for (int gi = 1; gi < groups; ++gi) {
      const Tensor& y = *a.in[gi * a.n + j];
      ONYX_CHECK(y.dtype() == x.dtype() && y.shape() == x.shape(),
                 "[{}] input {} should match X_{} ({} {}) but is {} {}", who, 2 + gi * a.n + j, j,
                 dtype_name(x.dtype()), shape_str(x.shape()), dtype_name(y.dtype()),
                 shape_str(y.shape()));
    }
  }
  for (int gi = 0; gi + 1 < groups; ++gi)
    for (int64_t j = 0; j < a.n; ++j) {
      const int o = static_cast<int>(gi * a.n + j);
      const Tensor& x = *a.in[j];
      a.out.push_back(ctx.output_wanted(o) ? ctx.allocate_output(o, x.dtype(), x.shape())
                                           : ctx.scratch(x.dtype(), x.shape()));
    }
  return a;
}

float required_float(const KernelInfo& info, const char* name) {
  return info.node.require_attr(name, Attribute::Type::Float).f;
}

/// Adagrad: inputs [X, G, H] groups, outputs [X_new, H_new].
class AdagradKernel final : public Kernel {
 public:
  explicit AdagradKernel(const KernelInfo& info)
      : eps_(info.node.attr_float("epsilon", 1e-6f)),
        decay_(info.node.attr_float("decay_factor", 0.0f)),
        l2_(info.node.attr_float("norm_coefficient", 0.0f)) {}

  void compute(KernelContext& ctx) const override {
    TrainingArgs a = parse_training_inputs(ctx, 3, "X, G, H");
    const double lr = a.r / (1.0 + static_cast<double>(a.t) * decay_);
    for (int64_t j = 0; j < a.n; ++j) {
      const Tensor &x = *a.in[j], &g = *a.in[a.n + j], &h = *a.in[2 * a.n + j];
      Tensor &xo = a.out[j], &ho = a.out[a.n + j];
      dispatch<TrainingTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
        parallel_for(x.numel(), ctx.threads(), kGrain, [&](int64_t b, int64_t e) {
          adagrad_update<T>(x.data<T>() + b, g.data<T>() + b, h.data<T>() + b, xo.data<T>() + b,
                            ho.data<T>() + b, e - b, T(lr), T(l2_), T(eps_));
        });
      });
    }
  }

 private:
  double eps_, decay_, l2_;
};

/// Momentum: inputs [X, G, V] groups, outputs [X_new, V_new]; mode standard or nesterov.
class MomentumKernel final : public Kernel {
 public:
  explicit MomentumKernel(const KernelInfo& info)
      : alpha_(required_float(info, "alpha")),
        beta_(required_float(info, "beta")),
        l2_(required_float(info, "norm_coefficient")) {
    const std::string mode = info.node.require_attr("mode", Attribute::Type::String).s;
    ONYX_CHECK(mode == "standard" || mode == "nesterov",
               "[{}] mode should be 'standard' or 'nesterov' but is '{}'", info.label(), mode);
    nesterov_ = mode == "nesterov";
  }

  void compute(KernelContext& ctx) const override {
    TrainingArgs a = parse_training_inputs(ctx, 3, "X, G, V");
    // The gradient's coefficient is 1 on the first update (T == 0).
    const double beta = a.t > 0 ? beta_ : 1.0;
    for (int64_t j = 0; j < a.n; ++j) {
      const Tensor &x = *a.in[j], &g = *a.in[a.n + j], &v = *a.in[2 * a.n + j];
      Tensor &xo = a.out[j], &vo = a.out[a.n + j];
      dispatch<TrainingTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
        const MomentumCoeffs<T> c{T(a.r), T(l2_), T(alpha_), T(beta), nesterov_};
        parallel_for(x.numel(), ctx.threads(), kGrain, [&](int64_t b, int64_t e) {
          momentum_update<T>(x.data<T>() + b, g.data<T>() + b, v.data<T>() + b, xo.data<T>() + b,
                             vo.data<T>() + b, e - b, c);
        });
      });
    }
  }

 private:
  double alpha_, beta_, l2_;
  bool nesterov_ = false;
};

/// Adam (ONNX semantics: eps added to sqrt(H) before the bias-corrected rate is applied, and
/// an optional post-update shrink): inputs [X, G, V, H] groups, outputs [X_new, V_new, H_new].
class AdamKernel final : public Kernel {
 public:
  explicit AdamKernel(const KernelInfo& info)
      : alpha_(info.node.attr_float("alpha", 0.9f)),
        beta_(info.node.attr_float("beta", 0.999f)),
        eps_(info.node.attr_float("epsilon", 1e-6f)),
        l2_(info.node.attr_float("norm_coefficient", 0.0f)),
        post_(info.node.attr_float("norm_coefficient_post", 0.0f)) {}

  void compute(KernelContext& ctx) const override {
    TrainingArgs a = parse_training_inputs(ctx, 4, "X, G, V, H");
    const double td = static_cast<double>(a.t);
    const double step =
        a.t > 0 ? a.r * std::sqrt(1.0 - std::pow(beta_, td)) / (1.0 - std::pow(alpha_, td)) : a.r;
    for (int64_t j = 0; j < a.n; ++j) {
      const Tensor &x = *a.in[j], &g = *a.in[a.n + j], &v = *a.in[2 * a.n + j],
                   &h = *a.in[3 * a.n + j];
      Tensor &xo = a.out[j], &vo = a.out[a.n + j], &ho = a.out[2 * a.n + j];
      dispatch<TrainingTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
        const AdamCoeffs<T> c{T(alpha_), T(beta_), T(eps_), T(l2_),
                              T(step),   T(1),     T(1),    T(1.0 - post_)};
        parallel_for(x.numel(), ctx.threads(), kGrain, [&](int64_t b, int64_t e) {
          adam_update<T>(x.data<T>() + b, g.data<T>() + b, v.data<T>() + b, h.data<T>() + b,
                         xo.data<T>() + b, vo.data<T>() + b, ho.data<T>() + b, e - b, c);
        });
      });
    }
  }

 private:
  double alpha_, beta_, eps_, l2_, post_;
};

}  // namespace

void register_training_kernels(KernelRegistry& r) {
  const std::vector<DataType> types{DataType::Float, DataType::Double};
  const char* domain = "ai.onnx.preview.training";
  r.add({"Adagrad", domain, 1, INT_MAX, "cpu", 2, types, make_factory<AdagradKernel>()});
  r.add({"Momentum", domain, 1, INT_MAX, "cpu", 2, types, make_factory<MomentumKernel>()});
  r.add({"Adam", domain, 1, INT_MAX, "cpu", 2, types, make_factory<AdamKernel>()});
}

}  // namespace onyx::cpu
