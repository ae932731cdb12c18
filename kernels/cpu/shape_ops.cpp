// Shape-level CPU kernels: ops that read only shapes or make new constants: Shape, Size,
// Dropout, Constant, ConstantOfShape, EyeLike, Range; the views (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity) are every provider's, in kernels/view_ops.cpp.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <random>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/move_util.h"
#include "kernels/parallel.h"
#include "kernels/view_ops.h"

namespace onyx::cpu {
namespace {

class ShapeKernel final : public Kernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.node.attr_int("start", 0)), end_(info.node.attr_int("end", INT64_MAX)) {}
  void compute(KernelContext& ctx) const override {
    const Shape& s = ctx.required_input(0).shape();
    auto r = static_cast<int64_t>(s.size());
    auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    int64_t b = clamp(start_), e = clamp(end_);
    int64_t n = std::max<int64_t>(0, e - b);
    auto* out = ctx.allocate_output(0, DataType::Int64, {n}).data<int64_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = s[b + i];
  }

 private:
  int64_t start_, end_;
};

void size_compute(KernelContext& ctx) {
  *ctx.allocate_output(0, DataType::Int64, {}).data<int64_t>() = ctx.required_input(0).numel();
}


/// Dropout: identity at inference; in training mode zeroes with probability `ratio` and
/// scales the rest by 1 / (1 - ratio). Seeded by the run's seed when it has one, else by the
/// `seed` attribute (drawing as numpy does), else at random.
class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(const KernelInfo& info)
      : bool_mask_(info.opset >= 10),
        seed_attr_(info.node.attr_int("seed", 0)),
        rng_(static_cast<uint32_t>(info.node.has_attr("seed") ? info.node.attr_int("seed", 0)
                                                              : std::random_device{}())) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    double ratio = 0.5;
    if (const Tensor* r = ctx.input(1)) {
      ONYX_CHECK(r->numel() == 1, "[{}] ratio should be a scalar but has shape {}", ctx.label(),
                 shape_str(r->shape()));
      ratio = r->to_double_vector()[0];
    }
    ONYX_CHECK(ratio >= 0 && ratio <= 1, "[{}] ratio {} is outside [0, 1]", ctx.label(), ratio);
    bool training = false;
    if (const Tensor* t = ctx.input(2)) {
      ONYX_CHECK(t->numel() == 1, "[{}] training_mode should be a scalar but has shape {}",
                 ctx.label(), shape_str(t->shape()));
      training = t->to_int64_vector()[0] != 0;
    }
    if (!training || ratio == 0) {
      ctx.set_output(0, Datum(x));
      if (ctx.num_outputs() > 1 && ctx.output_wanted(1)) fill_ones_mask(ctx, x);
      return;
    }
    train(ctx, x, ratio);
  }

 private:
  void fill_ones_mask(KernelContext& ctx, const Tensor& x) const {
    if (bool_mask_) {
      Tensor& m = ctx.allocate_output(1, DataType::Bool, x.shape());
      std::fill_n(m.data<bool>(), m.numel(), true);
      return;
    }
    Tensor& m = ctx.allocate_output(1, x.dtype(), x.shape());
    dispatch<FloatTypes>(x.dtype(), ctx.label(),
                         [&]<typename T>() { std::fill_n(m.data<T>(), m.numel(), T(1.0f)); });
  }

  void train(KernelContext& ctx, const Tensor& x, double ratio) const {
    ONYX_CHECK(bool_mask_, "[{}] training mode needs Dropout-12 or later", ctx.label());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    bool want_mask = ctx.num_outputs() > 1 && ctx.output_wanted(1);
    Tensor mask = want_mask ? ctx.allocate_output(1, DataType::Bool, x.shape())
                            : ctx.scratch(DataType::Bool, x.shape());
    bool* m = mask.data<bool>();
    std::bernoulli_distribution keep(1.0 - ratio);
    if (auto seed = ctx.run_seed()) {
      // Reproducible per run: the run's seed mixed with this node's identity.
      std::seed_seq seq{static_cast<uint32_t>(*seed), static_cast<uint32_t>(*seed >> 32),
                        static_cast<uint32_t>(std::hash<std::string>{}(ctx.node().name)),
                        static_cast<uint32_t>(seed_attr_)};
      std::mt19937 rng(seq);
      for (int64_t i = 0; i < x.numel(); ++i) m[i] = keep(rng);
    } else {
      // numpy's draw (np.random.seed(seed); uniform(0, 1, shape) >= ratio), which the ONNX
      // references use: its MT19937 seeds like std::mt19937, and a double takes 27 + 26 bits
      // of two outputs. A seeded node's first run matches them; later runs continue the stream.
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const uint32_t a = static_cast<uint32_t>(rng_()) >> 5, b = static_cast<uint32_t>(rng_()) >> 6;
        m[i] = (a * 67108864.0 + b) / 9007199254740992.0 >= ratio;
      }
    }
    double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      auto s = static_cast<acc_t<T>>(scale);
      for (int64_t i = 0; i < x.numel(); ++i)
        out[i] = T(m[i] ? static_cast<acc_t<T>>(in[i]) * s : acc_t<T>(0));
    });
  }

  bool bool_mask_;
  int64_t seed_attr_;
  mutable std::mutex mu_;
  mutable std::mt19937 rng_;
};

/// The tensor a Constant node's attribute describes.
Tensor constant_value(const Node& n) {
  for (const auto& [name, a] : n.attrs) {
    if (name == "value") return a.t;
    if (name == "value_float") return Tensor::scalar<float>(a.f);
    if (name == "value_int") return Tensor::scalar<int64_t>(a.i);
    if (name == "value_string") return Tensor::scalar<std::string>(a.s);
    if (name == "value_floats")
      return Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
    if (name == "value_ints")
      return Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
    if (name == "value_strings")
      return Tensor::from_vector<std::string>({static_cast<int64_t>(a.strings.size())}, a.strings);
    if (name == "sparse_value")
      throw NotImplemented(fmt::format("[{}] sparse_value is not supported", n.label()));
  }
  ONYX_THROW("[{}] Constant needs one of the value* attributes", n.label());
}

class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) : value_(constant_value(info.node)) {}
  void compute(KernelContext& ctx) const override {
    // A copy, so callers that write into outputs cannot change the constant.
    Tensor& out = ctx.allocate_output(0, value_.dtype(), value_.shape());
    dispatch_move(value_.dtype(), ctx.label(), [&]<typename T>() {
      std::copy_n(value_.data_as<T>(), value_.numel(), out.data_as<T>());
    });
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) {
    if (const Attribute* a = info.node.attr("value")) {
      ONYX_CHECK(a->t.numel() == 1, "[{}] value should hold one element but has shape {}",
                 info.label(), shape_str(a->t.shape()));
      value_ = a->t;
    } else {
      value_ = Tensor::scalar<float>(0.0f);
    }
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& s = ctx.required_input(0);
    ONYX_CHECK(s.rank() == 1, "[{}] shape input should be 1-D but has shape {}", ctx.label(),
               shape_str(s.shape()));
    Shape shape = s.to_int64_vector();
    for (int64_t d : shape)
      ONYX_CHECK(d >= 0, "[{}] shape {} has a negative dim", ctx.label(), shape_str(shape));
    Tensor& out = ctx.allocate_output(0, value_.dtype(), shape);
    dispatch_move(value_.dtype(), ctx.label(), [&]<typename T>() {
      std::fill_n(out.data_as<T>(), out.numel(), *value_.data_as<T>());
    });
  }

 private:
  Tensor value_;
};

class EyeLikeKernel final : public Kernel {
 public:
  explicit EyeLikeKernel(const KernelInfo& info)
      : dtype_(static_cast<DataType>(info.node.attr_int("dtype", 0))),
        // Past any dimension k puts no 1 anywhere; clamped so -k and i + k cannot overflow.
        k_(std::clamp<int64_t>(info.node.attr_int("k", 0), -(int64_t{1} << 62), int64_t{1} << 62)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() == 2, "[{}] input should be 2-D but has shape {}", ctx.label(),
               shape_str(x.shape()));
    DataType dt = dtype_ == DataType::Undefined ? x.dtype() : dtype_;
    Tensor& out = ctx.allocate_output(0, dt, x.shape());
    int64_t rows = x.shape()[0], cols = x.shape()[1];
    dispatch<NumericBoolTypes>(dt, ctx.label(), [&]<typename T>() {
      T* o = out.data<T>();
      std::fill_n(o, out.numel(), T(0));
      for (int64_t i = std::max<int64_t>(0, -k_); i < rows && i + k_ < cols; ++i)
        o[i * cols + i + k_] = T(1);
    });
  }

 private:
  DataType dtype_;
  int64_t k_;
};

void range_compute(KernelContext& ctx) {
  const Tensor& start = ctx.required_input(0);
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = ctx.required_input(i);
    ONYX_CHECK(t.numel() == 1 && t.dtype() == start.dtype(),
               "[{}] input {} should be a scalar {} but is {}{}", ctx.label(), i,
               dtype_name(start.dtype()), dtype_name(t.dtype()), shape_str(t.shape()));
  }
  using RangeTypes = TypeList<float, double, float16, bfloat16, int16_t, int32_t, int64_t>;
  dispatch<RangeTypes>(start.dtype(), ctx.label(), [&]<typename T>() {
    using A = acc_t<T>;
    A s = A(*start.data<T>()), l = A(*ctx.required_input(1).data<T>());
    A d = A(*ctx.required_input(2).data<T>());
    ONYX_CHECK(d != A(0), "[{}] delta is zero", ctx.label());
    // The count comes from data: NaN or one past int64 must be an error, not an undefined cast.
    const double count = std::max(0.0, std::ceil((double(l) - double(s)) / double(d)));
    ONYX_CHECK(count <= double(int64_t{1} << 62),
               "[{}] start {}, limit {} and delta {} give {} elements; at most 2^62 are possible",
               ctx.label(), double(s), double(l), double(d), count);
    const auto n = static_cast<int64_t>(count);
    T* o = ctx.allocate_output(0, start.dtype(), {n}).data<T>();
    // Every element lies between start and limit, but i * delta alone may pass the type (start
    // -2^30, delta 2^30 in int32): integers go through wrapping uint64 arithmetic, whose result
    // converted back is exact.
    using W = std::conditional_t<std::is_integral_v<A>, uint64_t, A>;
    for (int64_t i = 0; i < n; ++i)
      o[i] = T(static_cast<A>(static_cast<W>(s) + static_cast<W>(i) * static_cast<W>(d)));
  });
}

}  // namespace

void register_shape_kernels(KernelRegistry& r) {
  auto any = stored_types();
  // Shape and Size read only their input's shape: it may stay in device memory.
  r.add({"Shape", "", 1, INT_MAX, "cpu", 0, any, make_factory<ShapeKernel>(), {}, {0}});
  r.add({"Size", "", 1, INT_MAX, "cpu", 0, any, function_factory(size_compute), {}, {0}});
  register_view_kernels(r, "cpu", any);
  r.add({"Dropout", "", 1, INT_MAX, "cpu", 0,
         float_types() + std::vector{DataType::Float8E4M3FN, DataType::Float8E4M3FNUZ,
                                     DataType::Float8E5M2, DataType::Float8E5M2FNUZ},
         make_factory<DropoutKernel>()});
  r.add({"Constant", "", 1, INT_MAX, "cpu", -1, {}, make_factory<ConstantKernel>()});
  r.add({"ConstantOfShape",
         "",
         9,
         INT_MAX,
         "cpu",
         0,
         {DataType::Int64},
         make_factory<ConstantOfShapeKernel>()});
  r.add({"EyeLike", "", 9, INT_MAX, "cpu", 0, numeric_types() + std::vector{DataType::Bool},
         make_factory<EyeLikeKernel>()});
  r.add({"Range",
         "",
         11,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16, DataType::Int16,
          DataType::Int32, DataType::Int64},
         function_factory(range_compute)});
}

}  // namespace onyx::cpu
