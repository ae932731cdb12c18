// GridSample (opset 16: 2-D with bilinear/bicubic names; 20+: N-D linear/cubic) and
// AffineGrid (opset 20: 2-D and 3-D sampling grids from affine matrices). Semantics follow
// PyTorch's grid_sample, which the ONNX reference mirrors: coordinates are denormalised in
// float, then each axis contributes taps (index, weight) combined as a product.
#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/floor_index.h"
#include "kernels/cpu/move_util.h"

namespace onyx::cpu {
namespace {

enum class Interp { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

// Reflects x into [lo, hi] by bouncing off the nearer border.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  // A NaN or infinite coordinate (from the grid's data) has no reflection: any point will do.
  if (range <= 0 || !std::isfinite(x)) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = std::floor(dx / range);  // in double: dx / range may exceed int64
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = std::floor(dx / range);
    const double r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}

class GridSampleKernel final : public Kernel {
 public:
  explicit GridSampleKernel(const KernelInfo& info) {
    const Node& n = info.node;
    const std::string mode = n.attr_string("mode", info.opset < 20 ? "bilinear" : "linear");
    if (mode == "nearest")
      mode_ = Interp::Nearest;
    else if (mode == "linear" || mode == "bilinear")
      mode_ = Interp::Linear;
    else if (mode == "cubic" || mode == "bicubic")
      mode_ = Interp::Cubic;
    else
      ONYX_THROW("[{}] unknown mode '{}'", info.label(), mode);
    const std::string pad = n.attr_string("padding_mode", "zeros");
    if (pad == "zeros")
      padding_ = Padding::Zeros;
    else if (pad == "border")
      padding_ = Padding::Border;
    else if (pad == "reflection")
      padding_ = Padding::Reflection;
    else
      ONYX_THROW("[{}] unknown padding_mode '{}'", info.label(), pad);
    align_corners_ = n.attr_int("align_corners", 0) != 0;
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& grid = ctx.required_input(1);
    const int64_t r = x.rank() - 2;
    ONYX_CHECK(r >= 1, "[{}] X should have rank >= 3 but has shape {}", ctx.label(),
               shape_str(x.shape()));
    ONYX_CHECK(grid.rank() == r + 2 && grid.dim(0) == x.dim(0) && grid.dim(-1) == r,
               "[{}] grid should have shape [{}, ..., {}] (rank {}) for X of shape {} but has {}",
               ctx.label(), x.dim(0), r, r + 2, shape_str(x.shape()), shape_str(grid.shape()));
    const int64_t N = x.dim(0), C = x.dim(1);
    Shape out_shape{N, C};
    for (int64_t i = 1; i <= r; ++i) out_shape.push_back(grid.dim(i));
    Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
    if (y.numel() == 0) return;
    const int64_t P = shape_numel(Shape(grid.shape().begin() + 1, grid.shape().end() - 1));
    const Shape dims(x.shape().begin() + 2, x.shape().end());
    const int64_t plane = shape_numel(dims);
    const std::vector<int64_t> strides = contiguous_strides(dims);
    const std::vector<double> g = grid.to_double_vector();
    const int taps = mode_ == Interp::Nearest ? 1 : mode_ == Interp::Linear ? 2 : 4;
    int64_t combos = 1;
    for (int64_t i = 0; i < r; ++i) combos *= taps;

    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      parallel_for(N * P, ctx.threads(), 64, [&](int64_t b, int64_t e) {
        std::vector<int64_t> ax_idx(r * taps), off(combos);
        std::vector<A> ax_w(r * taps), w(combos);
        for (int64_t np = b; np < e; ++np) {
          const int64_t n = np / P;
          for (int64_t i = 0; i < r; ++i)  // grid's last axis lists x (innermost) first
            axis_taps(float(g[np * r + (r - 1 - i)]), dims[i], &ax_idx[i * taps], &ax_w[i * taps]);
          for (int64_t c = 0; c < combos; ++c) {
            int64_t o = 0, rem = c;
            A wc = A(1);
            for (int64_t i = r - 1; i >= 0; --i) {
              const int64_t t = rem % taps;
              rem /= taps;
              const int64_t idx = ax_idx[i * taps + t];
              o = (o < 0 || idx < 0) ? -1 : o + idx * strides[i];
              wc *= ax_w[i * taps + t];
            }
            off[c] = o;
            w[c] = wc;
          }
          const int64_t p = np % P;
          for (int64_t ch = 0; ch < C; ++ch) {
            const T* s = src + (n * C + ch) * plane;
            A acc = A(0);
            for (int64_t c = 0; c < combos; ++c)
              if (off[c] >= 0) acc += w[c] * A(s[off[c]]);
            dst[(n * C + ch) * P + p] = T(acc);
          }
        }
      });
    });
  }

 private:
  // Taps of one axis: source indices (-1 reads zero) and weights for normalised coord v.
  template <typename A>
  void axis_taps(float v, int64_t size, int64_t* idx, A* w) const {
    const float lo = align_corners_ ? 0.0f : -0.5f;
    const float hi = align_corners_ ? float(size - 1) : float(size) - 0.5f;
    float xf =
        align_corners_ ? (v + 1) / 2.0f * float(size - 1) : ((v + 1) * float(size) - 1) / 2.0f;
    if (mode_ == Interp::Nearest) xf = std::nearbyint(xf);
    if (xf < lo || xf > hi) {
      if (padding_ == Padding::Border)
        xf = std::clamp(xf, 0.0f, float(size - 1));
      else if (padding_ == Padding::Reflection)
        xf = float(reflect(xf, lo, hi));
    }
    auto pixel = [&](int64_t i) -> int64_t {
      if (padding_ == Padding::Zeros) return (i >= 0 && i < size) ? i : -1;
      if (padding_ == Padding::Border) return std::clamp<int64_t>(i, 0, size - 1);
      return std::clamp<int64_t>(int64_t(reflect(double(i), lo, hi)), 0, size - 1);
    };
    if (mode_ == Interp::Nearest) {
      idx[0] = pixel(floor_index(xf));
      w[0] = A(1);
      return;
    }
    const int64_t x0 = floor_index(xf);
    const A t = A(xf - float(x0));
    if (mode_ == Interp::Linear) {
      idx[0] = pixel(x0);
      idx[1] = pixel(x0 + 1);
      w[0] = A(1) - t;
      w[1] = t;
      return;
    }
    const A a = A(-0.75);
    auto near = [&](A d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
    auto far = [&](A d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
    w[0] = far(t + 1);
    w[1] = near(t);
    w[2] = near(1 - t);
    w[3] = far(2 - t);
    for (int k = 0; k < 4; ++k) idx[k] = pixel(x0 - 1 + k);
  }

  Interp mode_ = Interp::Linear;
  Padding padding_ = Padding::Zeros;
  bool align_corners_ = false;
};

// AffineGrid: grid[n, ..., :] = theta[n] @ [x, y, (z,) 1] over the normalised base grid.
class AffineGridKernel final : public Kernel {
 public:
  explicit AffineGridKernel(const KernelInfo& info)
      : align_corners_(info.node.attr_int("align_corners", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& theta = ctx.required_input(0);
    const std::vector<int64_t> size = ctx.required_input(1).to_int64_vector();
    ONYX_CHECK(size.size() == 4 || size.size() == 5,
               "[{}] size should have 4 (N, C, H, W) or 5 (N, C, D, H, W) values but has {}",
               ctx.label(), size.size());
    const int64_t r = static_cast<int64_t>(size.size()) - 2, N = size[0];
    ONYX_CHECK(theta.rank() == 3 && theta.dim(0) == N && theta.dim(1) == r && theta.dim(2) == r + 1,
               "[{}] theta should have shape [{}, {}, {}] but has {}", ctx.label(), N, r, r + 1,
               shape_str(theta.shape()));
    Shape out_shape{N};
    for (int64_t i = 0; i < r; ++i) out_shape.push_back(size[2 + i]);
    out_shape.push_back(r);
    Tensor& y = ctx.allocate_output(0, theta.dtype(), out_shape);
    if (y.numel() == 0) return;
    // base[i]: normalised coordinates along spatial axis i (D, H, W order).
    std::vector<std::vector<double>> base(r);
    for (int64_t i = 0; i < r; ++i) {
      const int64_t s = size[2 + i];
      for (int64_t k = 0; k < s; ++k) {
        if (align_corners_)
          base[i].push_back(s == 1 ? -1.0 : -1.0 + double(k) * (2.0 / double(s - 1)));
        else
          base[i].push_back(-1.0 + 1.0 / double(s) + double(k) * (2.0 / double(s)));
      }
    }
    const std::vector<double> th = theta.to_double_vector();
    const int64_t P = shape_numel(Shape(out_shape.begin() + 1, out_shape.end() - 1));
    dispatch<FloatTypes>(theta.dtype(), ctx.label(), [&]<typename T>() {
      T* dst = y.data<T>();
      parallel_for(N * P, ctx.threads(), 1024, [&](int64_t b, int64_t e) {
        std::vector<double> h(r + 1, 1.0);  // homogeneous point (x, y, z, 1)
        for (int64_t np = b; np < e; ++np) {
          const int64_t n = np / P;
          int64_t rem = np % P;
          for (int64_t i = r - 1; i >= 0; --i) {
            h[r - 1 - i] = base[i][rem % size[2 + i]];
            rem /= size[2 + i];
          }
          for (int64_t j = 0; j < r; ++j) {
            double acc = 0;
            for (int64_t k = 0; k <= r; ++k) acc += th[(n * r + j) * (r + 1) + k] * h[k];
            dst[np * r + j] = T(acc_t<T>(acc));
          }
        }
      });
    });
  }

 private:
  bool align_corners_;
};

}  // namespace

void register_grid_sample_kernels(KernelRegistry& r) {
  r.add({"GridSample", "", 16, INT_MAX, "cpu", 0, float_types(), make_factory<GridSampleKernel>()});
  r.add({"AffineGrid", "", 20, INT_MAX, "cpu", 0, float_types(), make_factory<AffineGridKernel>()});
}

}  // namespace onyx::cpu
