// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp, ReduceSumSquare (axes as the optional second input; the graph pass turns
// the older attribute form into it).
#include <climits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_plan.h"
#include "kernels/reduce_axes.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

using SumTypes = TypeList<float, double, float16, bfloat16, int32_t, int64_t, uint32_t, uint64_t>;
using MinMaxTypes = TypeList<float, double, float16, bfloat16, int8_t, int32_t, int64_t, uint8_t,
                             uint32_t, uint64_t, bool>;

template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<acc_t<T>>;

/// Accumulator of sums and products: float for 16-bit floats, 64-bit for integers.
template <typename T>
using sum_acc_t =
    std::conditional_t<is_float_v<T>, acc_t<T>,
                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
/// Type that log/sqrt/exp results are computed in.
template <typename T>
using math_t = std::conditional_t<std::is_same_v<acc_t<T>, float>, float, double>;

template <typename T, ReduceKind K>
struct ReduceOp {
  using Acc = std::conditional_t<K == ReduceKind::Max || K == ReduceKind::Min, acc_t<T>,
                                 sum_acc_t<T>>;
  T* y;
  int64_t n;  // elements per output

  Acc init() const {
    if constexpr (K == ReduceKind::Max) {
      if constexpr (is_float_v<T>) return -std::numeric_limits<Acc>::infinity();
      else return std::numeric_limits<T>::lowest();
    } else if constexpr (K == ReduceKind::Min) {
      if constexpr (is_float_v<T>) return std::numeric_limits<Acc>::infinity();
      else return std::numeric_limits<T>::max();
    } else if constexpr (K == ReduceKind::Prod) {
      return Acc(1);
    } else {
      return Acc(0);
    }
  }
  template <typename E>
  Acc step(Acc a, E x, int64_t) const {
    const Acc v = static_cast<Acc>(x);
    // NaN sticks; `|` rather than `||` keeps the loop branch-free so it vectorises.
    if constexpr (K == ReduceKind::Max) return ((a >= v) | (a != a)) ? a : v;
    else if constexpr (K == ReduceKind::Min) return ((a <= v) | (a != a)) ? a : v;
    else if constexpr (K == ReduceKind::Prod) return wrap_mul(a, v);
    else if constexpr (K == ReduceKind::L1) {
      if constexpr (std::is_unsigned_v<Acc>) return wrap_add(a, v);
      else return wrap_add(a, v < Acc(0) ? wrap_mul(v, Acc(-1)) : v);
    } else if constexpr (K == ReduceKind::L2 || K == ReduceKind::SumSquare) return wrap_add(a, wrap_mul(v, v));
    else return wrap_add(a, v);
  }
  Acc combine(Acc a, Acc b) const {
    if constexpr (K == ReduceKind::Max) return ((a >= b) | (a != a)) ? a : b;
    else if constexpr (K == ReduceKind::Min) return ((a <= b) | (a != a)) ? a : b;
    else if constexpr (K == ReduceKind::Prod) return wrap_mul(a, b);
    else return wrap_add(a, b);
  }
  void store(int64_t o, Acc a) const {
    using M = math_t<T>;
    if constexpr (K == ReduceKind::Mean) {
      if constexpr (is_float_v<T>) y[o] = static_cast<T>(a / static_cast<Acc>(n));
      else y[o] = n ? static_cast<T>(a / static_cast<Acc>(n)) : T(0);
    } else if constexpr (K == ReduceKind::L2) {
      y[o] = saturate_cast<T>(std::sqrt(static_cast<M>(a)));
    } else if constexpr (K == ReduceKind::LogSum) {
      y[o] = saturate_cast<T>(std::log(static_cast<M>(a)));
    } else {
      y[o] = static_cast<T>(a);
    }
  }
};

/// First pass of LogSumExp: the per-output maximum, kept in the math type.
template <typename T>
struct LseMaxOp {
  using Acc = math_t<T>;
  Acc* m;
  Acc init() const { return -std::numeric_limits<Acc>::infinity(); }
  template <typename E>
  Acc step(Acc a, E x, int64_t) const {
    const Acc v = static_cast<Acc>(x);
    return ((a >= v) | (a != a)) ? a : v;
  }
  Acc combine(Acc a, Acc b) const { return ((a >= b) | (a != a)) ? a : b; }
  void store(int64_t o, Acc a) const { m[o] = a; }
};

/// Second pass of LogSumExp: max + log(sum(exp(x - max))), stable for large inputs.
template <typename T>
struct LseSumOp {
  using Acc = math_t<T>;
  const Acc* m;
  T* y;
  Acc init() const { return Acc(0); }
  template <typename E>
  Acc step(Acc a, E x, int64_t o) const { return a + std::exp(static_cast<Acc>(x) - m[o]); }
  Acc combine(Acc a, Acc b) const { return a + b; }
  void store(int64_t o, Acc a) const {
    const Acc mx = m[o];
    y[o] = saturate_cast<T>(std::isfinite(mx) ? mx + std::log(a) : mx);
  }
};

class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelInfo& info, ReduceKind kind)
      : kind_(kind), attrs_(info) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const ReducedAxes r = reduced_axes(ctx, attrs_, x.shape());
    Tensor& y = ctx.allocate_output(0, x.dtype(), r.out);
    const ReducePlan plan = make_reduce_plan(x.shape(), r.reduced);
    const int threads = ctx.threads();

    if (kind_ == ReduceKind::Max || kind_ == ReduceKind::Min) {
      dispatch<MinMaxTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
        if (kind_ == ReduceKind::Max) run<T, ReduceKind::Max>(x, y, plan, threads);
        else run<T, ReduceKind::Min>(x, y, plan, threads);
      });
      return;
    }
    dispatch<SumTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      switch (kind_) {
        case ReduceKind::Sum: run<T, ReduceKind::Sum>(x, y, plan, threads); break;
        case ReduceKind::Mean: run<T, ReduceKind::Mean>(x, y, plan, threads); break;
        case ReduceKind::Prod: run<T, ReduceKind::Prod>(x, y, plan, threads); break;
        case ReduceKind::L1: run<T, ReduceKind::L1>(x, y, plan, threads); break;
        case ReduceKind::L2: run<T, ReduceKind::L2>(x, y, plan, threads); break;
        case ReduceKind::LogSum: run<T, ReduceKind::LogSum>(x, y, plan, threads); break;
        case ReduceKind::SumSquare: run<T, ReduceKind::SumSquare>(x, y, plan, threads); break;
        case ReduceKind::LogSumExp: {
          std::vector<math_t<T>> m(plan.out_numel);
          run_reduce(x.data<T>(), plan, LseMaxOp<T>{m.data()}, threads);
          run_reduce(x.data<T>(), plan, LseSumOp<T>{m.data(), y.data<T>()}, threads);
          break;
        }
        default: break;
      }
    });
  }

 private:
  template <typename T, ReduceKind K>
  static void run(const Tensor& x, Tensor& y, const ReducePlan& plan, int threads) {
    run_reduce(x.data<T>(), plan, ReduceOp<T, K>{y.data<T>(), plan.red_numel}, threads);
  }

  ReduceKind kind_;
  ReduceAttrs attrs_;
};

}  // namespace

void register_reduce_kernels(KernelRegistry& r) {
  const std::vector<DataType> sum_types =
      float_types() + std::vector<DataType>{DataType::Int32, DataType::Int64, DataType::UInt32,
                                            DataType::UInt64};
  const std::vector<DataType> min_max_types =
      sum_types + std::vector<DataType>{DataType::Int8, DataType::UInt8, DataType::Bool};
  const std::pair<const char*, ReduceKind> ops[] = {
      {"ReduceSum", ReduceKind::Sum},         {"ReduceMean", ReduceKind::Mean},
      {"ReduceMax", ReduceKind::Max},         {"ReduceMin", ReduceKind::Min},
      {"ReduceProd", ReduceKind::Prod},       {"ReduceL1", ReduceKind::L1},
      {"ReduceL2", ReduceKind::L2},           {"ReduceLogSum", ReduceKind::LogSum},
      {"ReduceLogSumExp", ReduceKind::LogSumExp}, {"ReduceSumSquare", ReduceKind::SumSquare},
  };
  for (const auto& [op, kind] : ops) {
    const bool min_max = kind == ReduceKind::Max || kind == ReduceKind::Min;
    r.add({op, "", 1, INT_MAX, "cpu", 0, min_max ? min_max_types : sum_types,
           [kind = kind](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<ReduceKernel>(info, kind);
           }});
  }
  register_arg_reduce_kernels(r);
  register_topk_kernels(r);
  register_cumsum_kernels(r);
  register_lp_norm_kernels(r);
}

}  // namespace onyx::cpu
