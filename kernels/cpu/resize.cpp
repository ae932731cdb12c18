// Resize (opsets 10..) and Upsample (7..9): nearest, linear and cubic interpolation over
// any set of axes. Interpolation is separable, so each resized axis gets a table of
// source indices and weights and is applied as one 1-D pass in double, as the ONNX
// reference does; nearest is a plain gather in the element type.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/floor_index.h"
#include "kernels/cpu/move_util.h"

namespace onyx::cpu {
namespace {

enum class Mode { Nearest, Linear, Cubic };
enum class Coord {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  TfCropAndResize
};
// Simple: floor, or ceil when downsampling (Resize-10 and Upsample, as ONNX Runtime does).
enum class Nearest { RoundPreferFloor, RoundPreferCeil, Floor, Ceil, Simple };

/// One axis' interpolation: output j reads in[idx[j*taps + k]] with weight w[j*taps + k],
/// or the extrapolation value where extrap[j] is set.
struct AxisTable {
  int64_t axis = 0, in = 0, out = 0, taps = 1;
  std::vector<int64_t> idx;
  std::vector<double> w;
  std::vector<uint8_t> extrap;
};

double cubic_weight(double x, double a) {
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

class ResizeKernel final : public Kernel {
 public:
  explicit ResizeKernel(const KernelInfo& info) : opset_(info.opset) {
    const Node& n = info.node;
    upsample_ = n.op_type == "Upsample";
    const std::string mode = n.attr_string("mode", "nearest");
    if (mode == "nearest")
      mode_ = Mode::Nearest;
    else if (mode == "linear" || mode == "bilinear")
      mode_ = Mode::Linear;
    else if (mode == "cubic" && !upsample_)
      mode_ = Mode::Cubic;
    else
      ONYX_THROW("[{}] unknown mode '{}'", info.label(), mode);
    const bool legacy = upsample_ || opset_ < 11;
    const std::string ct =
        legacy ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (ct == "half_pixel")
      coord_ = Coord::HalfPixel;
    else if (ct == "half_pixel_symmetric")
      coord_ = Coord::HalfPixelSymmetric;
    else if (ct == "pytorch_half_pixel")
      coord_ = Coord::PytorchHalfPixel;
    else if (ct == "align_corners")
      coord_ = Coord::AlignCorners;
    else if (ct == "asymmetric")
      coord_ = Coord::Asymmetric;
    else if (ct == "tf_half_pixel_for_nn")
      coord_ = Coord::TfHalfPixelForNn;
    else if (ct == "tf_crop_and_resize")
      coord_ = Coord::TfCropAndResize;
    else
      ONYX_THROW("[{}] unknown coordinate_transformation_mode '{}'", info.label(), ct);
    const std::string nm = legacy ? "simple" : n.attr_string("nearest_mode", "round_prefer_floor");
    if (nm == "round_prefer_floor")
      nearest_ = Nearest::RoundPreferFloor;
    else if (nm == "round_prefer_ceil")
      nearest_ = Nearest::RoundPreferCeil;
    else if (nm == "floor")
      nearest_ = Nearest::Floor;
    else if (nm == "ceil")
      nearest_ = Nearest::Ceil;
    else if (nm == "simple")
      nearest_ = Nearest::Simple;
    else
      ONYX_THROW("[{}] unknown nearest_mode '{}'", info.label(), nm);
    cubic_a_ = n.attr_float("cubic_coeff_a", -0.75f);
    exclude_outside_ = n.attr_int("exclude_outside", 0) != 0;
    extrapolation_ = n.attr_float("extrapolation_value", 0.0f);
    antialias_ = n.attr_int("antialias", 0) != 0 && mode_ != Mode::Nearest;
    axes_ = n.attr_ints("axes");
    const std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
    ONYX_CHECK(policy == "stretch" || policy == "not_larger" || policy == "not_smaller",
               "[{}] unknown keep_aspect_ratio_policy '{}'", info.label(), policy);
    policy_ = policy;
    if (upsample_ && opset_ < 9) {
      for (float s : n.attr_floats("scales")) attr_scales_.push_back(s);
      ONYX_CHECK(!attr_scales_.empty(), "[{}] attribute scales is required", info.label());
    }
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const int64_t r = x.rank();
    std::vector<int64_t> axes;
    for (int64_t a : axes_) axes.push_back(normalize_axis(a, r, ctx.label()));
    if (axes.empty())
      for (int64_t a = 0; a < r; ++a) axes.push_back(a);
    const int64_t na = static_cast<int64_t>(axes.size());

    // Inputs by version: Upsample-7 (X) + attr; Resize-10/Upsample-9 (X, scales);
    // Resize-11+ (X, roi, scales, sizes).
    const bool legacy = upsample_ || opset_ < 11;
    std::vector<double> scales = attr_scales_, roi;
    std::vector<int64_t> sizes;
    const Tensor* st = legacy ? (upsample_ && opset_ < 9 ? nullptr : ctx.input(1))
                              : (ctx.num_inputs() > 2 ? ctx.input(2) : nullptr);
    if (st && st->numel() > 0) {
      ONYX_CHECK(is_float(st->dtype()), "[{}] scales should be float but is {}", ctx.label(),
                 dtype_name(st->dtype()));
      scales.clear();
      for (double s : st->to_double_vector()) scales.push_back(static_cast<float>(s));
    }
    if (!legacy) {
      const Tensor* sz = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
      if (sz && sz->numel() > 0) sizes = sz->to_int64_vector();
      const Tensor* rt = ctx.input(1);
      if (rt && rt->numel() > 0) roi = rt->to_double_vector();
    }
    ONYX_CHECK(scales.empty() != sizes.empty(),
               "[{}] exactly one of scales and sizes should be given (found {} scales, {} sizes)",
               ctx.label(), scales.size(), sizes.size());
    const size_t want = static_cast<size_t>(na);
    ONYX_CHECK(scales.empty() || scales.size() == want,
               "[{}] scales should have {} values for input shape {} but has {}", ctx.label(), want,
               shape_str(x.shape()), scales.size());
    ONYX_CHECK(sizes.empty() || sizes.size() == want,
               "[{}] sizes should have {} values for input shape {} but has {}", ctx.label(), want,
               shape_str(x.shape()), sizes.size());
    if (coord_ == Coord::TfCropAndResize)
      ONYX_CHECK(roi.size() == 2 * want, "[{}] roi should have {} values but has {}", ctx.label(),
                 2 * want, roi.size());
    else
      roi.clear();  // only tf_crop_and_resize reads it (a short roi was read past its end: fuzzing)

    // Per-axis scale and output size.
    std::vector<double> scale(na);
    Shape out_shape = x.shape();
    if (!scales.empty()) {
      for (int64_t i = 0; i < na; ++i) {
        ONYX_CHECK(scales[i] > 0, "[{}] scales should be positive but scales[{}] is {}",
                   ctx.label(), i, scales[i]);
        scale[i] = scales[i];
        const double n = scales[i] * double(x.dim(axes[i]));
        ONYX_CHECK(n < 0x1p62, "[{}] scales[{}] = {} makes axis {} of size {} too large ({} elements)", ctx.label(), i,
                   scales[i], axes[i], x.dim(axes[i]), n);
        out_shape[axes[i]] = static_cast<int64_t>(n);
      }
    } else {
      for (int64_t i = 0; i < na; ++i) {
        ONYX_CHECK(sizes[i] >= 0, "[{}] sizes should be >= 0 but sizes[{}] is {}", ctx.label(), i,
                   sizes[i]);
        scale[i] = double(sizes[i]) / double(x.dim(axes[i]));
        out_shape[axes[i]] = sizes[i];
      }
      if (policy_ != "stretch") {
        double s = scale[0];
        for (double v : scale) s = policy_ == "not_larger" ? std::min(s, v) : std::max(s, v);
        for (int64_t i = 0; i < na; ++i) {
          scale[i] = s;
          const double n = s * double(x.dim(axes[i])) + 0.5;
          ONYX_CHECK(n < 0x1p62, "[{}] sizes {} with keep_aspect_ratio_policy {} make axis {} too large ({} elements)",
                     ctx.label(), fmt::join(sizes, ", "), policy_, axes[i], n);
          out_shape[axes[i]] = static_cast<int64_t>(n);
        }
      }
    }

    std::vector<AxisTable> tables;
    for (int64_t i = 0; i < na; ++i) {
      const int64_t a = axes[i], in = x.dim(a), out = out_shape[a];
      const double r0 = roi.empty() ? 0.0 : roi[i], r1 = roi.empty() ? 1.0 : roi[na + i];
      const bool identity = std::abs(scale[i] - 1.0) <= 1e-9 && out == in &&
                            (coord_ != Coord::TfCropAndResize ||
                             (std::abs(r0) <= 1e-9 && std::abs(r1 - 1.0) <= 1e-9));
      if (identity || out == 0) continue;
      ONYX_CHECK(in > 0, "[{}] cannot resize axis {} of size 0 to {}", ctx.label(), a, out);
      tables.push_back(make_table(a, in, out, scale[i], r0, r1));
    }

    Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
    if (y.numel() == 0) return;
    if (mode_ == Mode::Nearest)
      run_nearest(ctx, x, y, tables);
    else
      run_separable(ctx, x, y, tables);
  }

 private:
  // Source coordinate of output index j along an axis, per coordinate_transformation_mode.
  double source_coord(int64_t j, int64_t in, int64_t out, double scale, double r0,
                      double r1) const {
    const double y = double(j), out_f = scale * double(in);
    switch (coord_) {
      case Coord::AlignCorners:
        return out_f == 1 ? 0.0 : y * double(in - 1) / (out_f - 1);
      case Coord::Asymmetric:
        return y / scale;
      case Coord::TfHalfPixelForNn:
        return (y + 0.5) / scale;
      case Coord::TfCropAndResize: {
        const double x = out_f == 1 ? (r1 - r0) * double(in - 1) / 2
                                    : y * (r1 - r0) * double(in - 1) / (out_f - 1);
        return x + r0 * double(in - 1);
      }
      case Coord::PytorchHalfPixel:
        return out_f == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
      case Coord::HalfPixel:
        return (y + 0.5) / scale - 0.5;
      case Coord::HalfPixelSymmetric: {
        const double offset = double(in) / 2 * (1 - double(out) / out_f);
        return offset + (y + 0.5) / scale - 0.5;
      }
    }
    return 0;
  }

  AxisTable make_table(int64_t axis, int64_t in, int64_t out, double scale, double r0,
                       double r1) const {
    AxisTable t;
    t.axis = axis;
    t.in = in;
    t.out = out;
    t.extrap.assign(out, 0);
    const double s = std::min(scale, 1.0);
    int64_t first = 0;  // window start relative to floor(x)
    if (mode_ == Mode::Nearest) {
      t.taps = 1;
    } else if (mode_ == Mode::Linear) {
      first = antialias_ ? int64_t(std::floor(-1 / s)) + 1 : 0;
      t.taps = 2 - 2 * first;
    } else {
      first = antialias_ ? int64_t(std::floor(-2 / s)) + 1 : -1;
      t.taps = 2 - 2 * first;
    }
    t.idx.resize(out * t.taps);
    t.w.resize(out * t.taps);
    for (int64_t j = 0; j < out; ++j) {
      const double xo = source_coord(j, in, out, scale, r0, r1);
      if (coord_ == Coord::TfCropAndResize && (xo < 0 || xo > double(in - 1))) t.extrap[j] = 1;
      // The left neighbour is preferred: an integral coordinate is base + 1 with ratio 1.
      int64_t base = floor_index(xo);  // a NaN or huge roi gives a far, clamped base
      double ratio = xo - double(base);
      if (ratio == 0) {
        base -= 1;
        ratio = 1;
      }
      int64_t* idx = &t.idx[j * t.taps];
      double* w = &t.w[j * t.taps];
      if (mode_ == Mode::Nearest) {
        bool up;  // take base + 1
        switch (nearest_) {
          case Nearest::RoundPreferFloor:
            up = ratio > 0.5;
            break;
          case Nearest::RoundPreferCeil:
            up = ratio >= 0.5;
            break;
          case Nearest::Floor:
            up = ratio == 1;
            break;
          case Nearest::Ceil:
            up = true;
            break;
          default:
            up = scale < 1 || ratio == 1;
            break;
        }
        idx[0] = std::clamp<int64_t>(base + (up ? 1 : 0), 0, in - 1);
        w[0] = 1;
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < t.taps; ++k) {
        const double d = double(first + k) - ratio;  // signed distance to the tap
        double c;
        if (mode_ == Mode::Linear)
          c = antialias_ ? std::clamp(1 - std::abs(d * s), 0.0, 1.0) : 1 - std::abs(d);
        else
          c = cubic_weight(antialias_ ? d * s : d, cubic_a_);
        const int64_t src = base + first + k;
        if (exclude_outside_ && (src < 0 || src >= in)) c = 0;
        idx[k] = std::clamp<int64_t>(src, 0, in - 1);
        w[k] = c;
        sum += c;
      }
      if (antialias_ || exclude_outside_) {
        if (sum == 0) sum = 1;
        for (int64_t k = 0; k < t.taps; ++k) w[k] /= sum;
      }
    }
    return t;
  }

  // Gather in the element type: out[..] = x[idx per axis], or the extrapolation value.
  void run_nearest(KernelContext& ctx, const Tensor& x, Tensor& y,
                   const std::vector<AxisTable>& tables) const {
    const int64_t r = x.rank();
    const Shape& os = y.shape();
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    // off[a][j]: input element offset contributed by output index j on axis a (-1: extrapolate).
    std::vector<std::vector<int64_t>> off(r);
    for (int64_t a = 0; a < r; ++a) {
      off[a].resize(os[a]);
      for (int64_t j = 0; j < os[a]; ++j) off[a][j] = j * xs[a];
    }
    for (const AxisTable& t : tables)
      for (int64_t j = 0; j < t.out; ++j) off[t.axis][j] = t.extrap[j] ? -1 : t.idx[j] * xs[t.axis];
    const int64_t inner = r ? os[r - 1] : 1;
    const int64_t rows = y.numel() / std::max<int64_t>(inner, 1);
    dispatch<NumericBoolTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      // As the linear modes convert it: an extrapolation_value past T's range (1e28 for a
      // uint16 image, found by the model fuzz target) clamps instead of being undefined.
      const T ext = saturate<T>(extrapolation_);
      parallel_for(rows, ctx.threads(), std::max<int64_t>(1, 4096 / inner),
                   [&](int64_t b, int64_t e) {
                     for (int64_t row = b; row < e; ++row) {
                       int64_t base = 0, rem = row;
                       for (int64_t a = r - 2; a >= 0; --a) {
                         const int64_t o = off[a][rem % os[a]];
                         rem /= os[a];
                         base = (base < 0 || o < 0) ? -1 : base + o;
                       }
                       T* d = dst + row * inner;
                       if (r == 0) {
                         d[0] = src[0];
                         continue;
                       }
                       const int64_t* last = off[r - 1].data();
                       for (int64_t j = 0; j < inner; ++j)
                         d[j] = (base < 0 || last[j] < 0) ? ext : src[base + last[j]];
                     }
                   });
    });
  }

  // Linear and cubic: one weighted 1-D pass per resized axis over a double buffer.
  void run_separable(KernelContext& ctx, const Tensor& x, Tensor& y,
                     const std::vector<AxisTable>& tables) const {
    ONYX_CHECK(x.dtype() != DataType::Bool, "[{}] {} mode needs a numeric input but got bool",
               ctx.label(), mode_ == Mode::Linear ? "linear" : "cubic");
    Shape cur = x.shape();
    std::vector<double> buf(x.numel());
    dispatch<NumericTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) buf[i] = double(acc_t<T>(src[i]));
    });
    std::vector<double> next;
    for (const AxisTable& t : tables) {
      const int64_t outer = dims_product(cur, 0, t.axis);
      const int64_t inner = dims_product(cur, t.axis + 1, cur.size());
      cur[t.axis] = t.out;
      next.assign(outer * t.out * inner, 0.0);
      const double ext = extrapolation_;
      parallel_for(outer * t.out, ctx.threads(), std::max<int64_t>(1, 8192 / (inner * t.taps)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t oj = b; oj < e; ++oj) {
                       const int64_t o = oj / t.out, j = oj % t.out;
                       double* d = next.data() + oj * inner;
                       if (t.extrap[j]) {
                         std::fill(d, d + inner, ext);
                         continue;
                       }
                       const double* s = buf.data() + o * t.in * inner;
                       for (int64_t k = 0; k < t.taps; ++k) {
                         const double wk = t.w[j * t.taps + k];
                         const double* sk = s + t.idx[j * t.taps + k] * inner;
                         for (int64_t i = 0; i < inner; ++i) d[i] += wk * sk[i];
                       }
                     }
                   });
      buf.swap(next);
    }
    dispatch<NumericTypes>(y.dtype(), ctx.label(), [&]<typename T>() {
      T* dst = y.data<T>();
      parallel_for(y.numel(), ctx.threads(), kCheapGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = saturate<T>(buf[i]);
      });
    });
  }

  // numpy_helper.saturate_cast: integers round half to even and clamp; floats clamp to
  // the finite range.
  template <typename T>
  static T saturate(double v) {
    if constexpr (std::is_integral_v<T>) {
      v = std::nearbyint(v);
      const double lo = double(std::numeric_limits<T>::lowest());
      const double hi = double(std::numeric_limits<T>::max());
      if (!(v > lo)) return std::numeric_limits<T>::lowest();
      if (v >= hi) return std::numeric_limits<T>::max();
      return T(v);
    } else if constexpr (std::is_same_v<T, double>) {
      return v;
    } else {
      const double hi = std::is_same_v<T, float>     ? double(std::numeric_limits<float>::max())
                        : std::is_same_v<T, float16> ? 65504.0
                                                     : 3.3895313892515355e38;
      return T(acc_t<T>(std::isnan(v) ? v : std::clamp(v, -hi, hi)));
    }
  }

  int64_t opset_;
  bool upsample_ = false;
  Mode mode_ = Mode::Nearest;
  Coord coord_ = Coord::HalfPixel;
  Nearest nearest_ = Nearest::RoundPreferFloor;
  double cubic_a_ = -0.75;
  bool exclude_outside_ = false;
  double extrapolation_ = 0;
  bool antialias_ = false;
  std::vector<int64_t> axes_;
  std::string policy_;
  std::vector<double> attr_scales_;
};

}  // namespace

void register_resize_kernels(KernelRegistry& r) {
  const auto types = numeric_types() + std::vector<DataType>{DataType::Bool};
  r.add({"Resize", "", 10, INT_MAX, "cpu", 0, types, make_factory<ResizeKernel>()});
  r.add({"Upsample", "", 7, 9, "cpu", 0, types, make_factory<ResizeKernel>()});
}

}  // namespace onyx::cpu
