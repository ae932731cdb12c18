// Image and detection ops: CenterCropPad, Col2Im, MaxUnpool, RoiAlign, NonMaxSuppression,
// DeformConv (2-D) and BitCast.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/floor_index.h"
#include "kernels/cpu/move_util.h"
#include "kernels/cpu/window.h"

namespace onyx::cpu {
namespace {

// ---- CenterCropPad ---------------------------------------------------------------------

class CenterCropPadKernel final : public Kernel {
 public:
  explicit CenterCropPadKernel(const KernelInfo& info) : axes_(info.node.attr_ints("axes")) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const std::vector<int64_t> shape = ctx.required_input(1).to_int64_vector();
    const int64_t r = x.rank();
    std::vector<int64_t> axes;
    for (int64_t a : axes_) axes.push_back(normalize_axis(a, r, ctx.label()));
    if (axes.empty())
      for (int64_t a = 0; a < r; ++a) axes.push_back(a);
    ONYX_CHECK(shape.size() == axes.size(), "[{}] shape should have {} values but has {}",
               ctx.label(), axes.size(), shape.size());
    Shape out = x.shape();
    std::vector<int64_t> in_start(r, 0), out_start(r, 0), len = x.shape();
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = axes[i], dim = x.dim(a), sh = shape[i];
      ONYX_CHECK(sh >= 0, "[{}] shape[{}] should be >= 0 but is {}", ctx.label(), i, sh);
      out[a] = sh;
      if (sh < dim)
        in_start[a] = (dim - sh) / 2;
      else
        out_start[a] = (sh - dim) / 2;
      len[a] = std::min(sh, dim);
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    if (x.dtype() != DataType::String) std::memset(y.raw(), 0, y.nbytes());
    if (shape_numel(len) == 0) return;
    const std::vector<int64_t> xs = contiguous_strides(x.shape()), ys = contiguous_strides(out);
    const int64_t inner = r ? len[r - 1] : 1;
    const int64_t rows = shape_numel(len) / inner;
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data_as<T>();
      T* dst = y.data_as<T>();
      for (int64_t row = 0; row < rows; ++row) {
        int64_t rem = row, si = r ? in_start[r - 1] : 0, di = r ? out_start[r - 1] : 0;
        for (int64_t a = r - 2; a >= 0; --a) {
          const int64_t idx = rem % len[a];
          rem /= len[a];
          si += (idx + in_start[a]) * xs[a];
          di += (idx + out_start[a]) * ys[a];
        }
        for (int64_t j = 0; j < inner; ++j) dst[di + j] = src[si + j];
      }
    });
  }

 private:
  std::vector<int64_t> axes_;
};

// ---- Col2Im ----------------------------------------------------------------------------

class Col2ImKernel final : public Kernel {
 public:
  explicit Col2ImKernel(const KernelInfo& info)
      : dilations_(info.node.attr_ints("dilations")),
        pads_(info.node.attr_ints("pads")),
        strides_(info.node.attr_ints("strides")) {
    // strides [0] divided by zero before; 2^32 bounds keep the block arithmetic in int64.
    constexpr int64_t kMax = int64_t{1} << 32;
    check_attr_values(info.label(), "strides", strides_, 1, kMax);
    check_attr_values(info.label(), "dilations", dilations_, 1, kMax);
    check_attr_values(info.label(), "pads", pads_, 0, kMax);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const std::vector<int64_t> img = ctx.required_input(1).to_int64_vector();
    const std::vector<int64_t> blk = ctx.required_input(2).to_int64_vector();
    const int64_t r = static_cast<int64_t>(img.size());
    ONYX_CHECK(r >= 1 && blk.size() == img.size(),
               "[{}] image_shape ({} values) and block_shape ({} values) should match", ctx.label(),
               img.size(), blk.size());
    std::vector<int64_t> d = dilations_, s = strides_, p = pads_;
    if (d.empty()) d.assign(r, 1);
    if (s.empty()) s.assign(r, 1);
    if (p.empty()) p.assign(2 * r, 0);
    ONYX_CHECK(int64_t(d.size()) == r && int64_t(s.size()) == r && int64_t(p.size()) == 2 * r,
               "[{}] dilations, strides and pads should have {}, {} and {} values", ctx.label(), r,
               r, 2 * r);
    // Negative sizes would pair up into a positive count and reach % 0 or negative indexes.
    constexpr int64_t kMaxDim = int64_t{1} << 32;
    for (int64_t i = 0; i < r; ++i)
      ONYX_CHECK(img[i] >= 0 && img[i] <= kMaxDim && blk[i] >= 1 && blk[i] <= kMaxDim,
                 "[{}] image_shape {} and block_shape {} should hold sizes in [0, 2^32] and [1, 2^32]",
                 ctx.label(), shape_str(img), shape_str(blk));
    const int64_t kp = shape_numel(blk);
    ONYX_CHECK(x.rank() == 3 && kp > 0 && x.dim(1) % kp == 0,
               "[{}] input should have shape [N, C * {}, L] but has {}", ctx.label(), kp,
               shape_str(x.shape()));
    std::vector<int64_t> nb(r);
    for (int64_t i = 0; i < r; ++i) {
      using I = __int128;  // dilations * block sizes may pass int64
      const I span = I{img[i]} + p[i] + p[r + i] - (I{d[i]} * (blk[i] - 1) + 1);
      ONYX_CHECK(span >= 0, "[{}] block_shape {} (dilated) does not fit the padded image {}",
                 ctx.label(), shape_str(blk), shape_str(img));
      nb[i] = static_cast<int64_t>(span / s[i] + 1);
    }
    const int64_t L = shape_numel(nb);
    ONYX_CHECK(x.dim(2) == L, "[{}] input dimension 2 should be the {} sliding blocks but is {}",
               ctx.label(), L, x.dim(2));
    const int64_t N = x.dim(0), C = x.dim(1) / kp, ip = shape_numel(img);
    Shape out{N, C};
    out.insert(out.end(), img.begin(), img.end());
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    const std::vector<int64_t> is = contiguous_strides(img);
    dispatch<NumericTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      parallel_for(N * C, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        std::vector<A> acc(ip);
        for (int64_t nc = b; nc < e; ++nc) {
          std::fill(acc.begin(), acc.end(), A(0));
          const T* col = src + nc * kp * L;
          for (int64_t k = 0; k < kp; ++k) {
            for (int64_t l = 0; l < L; ++l) {
              int64_t kr = k, lr = l, off = 0;
              bool inside = true;
              for (int64_t i = r - 1; i >= 0; --i) {
                const int64_t ki = kr % blk[i], li = lr % nb[i];
                kr /= blk[i];
                lr /= nb[i];
                const int64_t pos = li * s[i] - p[i] + ki * d[i];
                if (pos < 0 || pos >= img[i]) inside = false;
                off += pos * is[i];
              }
              if (inside) acc[off] += A(col[k * L + l]);
            }
          }
          for (int64_t i = 0; i < ip; ++i) dst[nc * ip + i] = T(acc[i]);
        }
      });
    });
  }

 private:
  std::vector<int64_t> dilations_, pads_, strides_;
};

// ---- MaxUnpool -------------------------------------------------------------------------

class MaxUnpoolKernel final : public Kernel {
 public:
  explicit MaxUnpoolKernel(const KernelInfo& info)
      : kernel_(info.node.attr_ints("kernel_shape")),
        pads_(info.node.attr_ints("pads")),
        strides_(info.node.attr_ints("strides")) {
    ONYX_CHECK(!kernel_.empty(), "[{}] attribute kernel_shape is required", info.label());
    // compute() indexes strides and pads by spatial dim: short lists were read past their end
    // (ASan, tests/validation/bad_attributes.py).
    const size_t r = kernel_.size();
    if (strides_.empty()) strides_.assign(r, 1);
    if (pads_.empty()) pads_.assign(2 * r, 0);
    ONYX_CHECK(strides_.size() == r && pads_.size() == 2 * r,
               "[{}] attributes 'strides' [{}] and 'pads' [{}] should hold {} and {} values for kernel_shape [{}]",
               info.label(), fmt::join(strides_, ", "), fmt::join(pads_, ", "), r, 2 * r, fmt::join(kernel_, ", "));
    constexpr int64_t kMax = int64_t{1} << 31;
    check_attr_values(info.label(), "kernel_shape", kernel_, 1, kMax);
    check_attr_values(info.label(), "strides", strides_, 1, kMax);
    check_attr_values(info.label(), "pads", pads_, 0, kMax);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    const Tensor* os = ctx.input(2);
    const int64_t r = static_cast<int64_t>(kernel_.size());
    ONYX_CHECK(x.rank() == r + 2 && ind.shape() == x.shape(),
               "[{}] X should have rank {} and I its shape, but X is {} and I is {}", ctx.label(),
               r + 2, shape_str(x.shape()), shape_str(ind.shape()));
    const std::vector<int64_t>& s = strides_, &p = pads_;
    Shape inferred{x.dim(0), x.dim(1)};
    for (int64_t i = 0; i < r; ++i) {
      const int64_t d = checked_dim_mul(x.dim(2 + i) - 1, s[i], ctx.label()) - (p[i] + p[r + i]) + kernel_[i];
      ONYX_CHECK(d >= 0, "[{}] X {} with strides [{}], pads [{}] and kernel_shape [{}] unpools to a negative size",
                 ctx.label(), shape_str(x.shape()), fmt::join(s, ", "), fmt::join(p, ", "), fmt::join(kernel_, ", "));
      inferred.push_back(d);
    }
    Shape out = inferred;
    if (os && os->numel() > 0) {
      out = os->to_int64_vector();
      ONYX_CHECK(out.size() == inferred.size(),
                 "[{}] output_shape should have {} values but has {}", ctx.label(), inferred.size(),
                 out.size());
      for (size_t i = 0; i < out.size(); ++i)
        ONYX_CHECK(out[i] >= inferred[i], "[{}] output_shape {} is smaller than the inferred {}",
                   ctx.label(), shape_str(out), shape_str(inferred));
    }
    const int64_t total = shape_numel(inferred);
    const std::vector<int64_t> iv = ind.to_int64_vector();
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    std::memset(y.raw(), 0, y.nbytes());
    // Indices address the inferred shape; that block sits at the origin of a larger output.
    const std::vector<int64_t> is = contiguous_strides(inferred), ys = contiguous_strides(out);
    dispatch_by_size(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data_as<T>();
      T* dst = y.data_as<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t f = iv[i];
        ONYX_CHECK(f >= 0 && f < total, "[{}] index {} is out of range [0, {})", ctx.label(), f,
                   total);
        int64_t o = 0;
        for (size_t a = 0; a < inferred.size(); ++a) {
          o += (f / is[a]) * ys[a];
          f %= is[a];
        }
        dst[o] = src[i];
      }
    });
  }

 private:
  std::vector<int64_t> kernel_, pads_, strides_;
};

// ---- RoiAlign --------------------------------------------------------------------------

class RoiAlignKernel final : public Kernel {
 public:
  explicit RoiAlignKernel(const KernelInfo& info) {
    const Node& n = info.node;
    half_pixel_ = info.opset >= 16 &&
                  n.attr_string("coordinate_transformation_mode", "half_pixel") == "half_pixel";
    const std::string mode = n.attr_string("mode", "avg");
    ONYX_CHECK(mode == "avg" || mode == "max", "[{}] mode should be avg or max but is '{}'",
               info.label(), mode);
    max_ = mode == "max";
    oh_ = n.attr_int("output_height", 1);
    ow_ = n.attr_int("output_width", 1);
    sampling_ = n.attr_int("sampling_ratio", 0);
    spatial_scale_ = n.attr_float("spatial_scale", 1.0f);
    constexpr int64_t kMax = 1 << 16;
    ONYX_CHECK(oh_ >= 1 && oh_ <= kMax && ow_ >= 1 && ow_ <= kMax,
               "[{}] output_height and output_width should be in [1, {}] but are {} and {}", info.label(), kMax,
               oh_, ow_);
    ONYX_CHECK(sampling_ >= 0 && sampling_ <= kMax, "[{}] attribute 'sampling_ratio' should be in [0, {}] but is {}",
               info.label(), kMax, sampling_);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& rois = ctx.required_input(1);
    const Tensor& bi = ctx.required_input(2);
    ONYX_CHECK(x.rank() == 4, "[{}] X should have shape [N, C, H, W] but has {}", ctx.label(),
               shape_str(x.shape()));
    ONYX_CHECK(rois.rank() == 2 && rois.dim(1) == 4 && bi.rank() == 1 && bi.dim(0) == rois.dim(0),
               "[{}] rois should be [R, 4] and batch_indices [R], but they are {} and {}",
               ctx.label(), shape_str(rois.shape()), shape_str(bi.shape()));
    const int64_t R = rois.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    const std::vector<double> rv = rois.to_double_vector();
    const std::vector<int64_t> bv = bi.to_int64_vector();
    for (int64_t b : bv)
      ONYX_CHECK(b >= 0 && b < x.dim(0), "[{}] batch index {} is out of range [0, {})", ctx.label(),
                 b, x.dim(0));
    Tensor& y = ctx.allocate_output(0, x.dtype(), {R, C, oh_, ow_});
    if (H == 0 || W == 0) {
      // An empty feature map has nothing to sample: every bin is 0, as for samples outside
      // a map (the sampling below would read the empty plane).
      std::memset(y.raw(), 0, y.nbytes());
      return;
    }
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      parallel_for(R, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) roi(src, dst, n, C, H, W, rv.data() + n * 4, bv[n]);
      });
    });
  }

 private:
  struct Sample {
    int64_t pos[4];
    double w[4];
  };

  template <typename T>
  void roi(const T* src, T* dst, int64_t n, int64_t C, int64_t H, int64_t W, const double* box,
           int64_t batch) const {
    const double off = half_pixel_ ? 0.5 : 0.0, sc = spatial_scale_;
    const double x0 = box[0] * sc - off, y0 = box[1] * sc - off;
    double rw = box[2] * sc - off - x0, rh = box[3] * sc - off - y0;
    if (!half_pixel_) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / double(oh_), bw = rw / double(ow_);
    // The adaptive grid grows with the ROI's size, which comes from data: a ROI of 1e30
    // pixels (or NaN) must be an error, not an undefined float-to-int cast or a huge reserve.
    ONYX_CHECK(std::isfinite(box[0]) && std::isfinite(box[1]) && std::isfinite(box[2]) && std::isfinite(box[3]),
               "[RoiAlign] ROI {} of batch item {} ([{}, {}, {}, {}]) is not finite", n, batch, box[0], box[1],
               box[2], box[3]);
    const double grid_h = sampling_ > 0 ? double(sampling_) : std::ceil(rh / double(oh_));
    const double grid_w = sampling_ > 0 ? double(sampling_) : std::ceil(rw / double(ow_));
    constexpr double kMaxSamples = double(int64_t{1} << 26);
    ONYX_CHECK(std::isfinite(grid_h) && std::isfinite(grid_w) &&
                   double(oh_) * double(ow_) * std::max(grid_h, 1.0) * std::max(grid_w, 1.0) <= kMaxSamples,
               "[RoiAlign] ROI {} of batch item {} ([{}, {}, {}, {}]) needs a {} x {} sampling grid per bin; at "
               "most {} samples per ROI are supported",
               n, batch, box[0], box[1], box[2], box[3], grid_h, grid_w, kMaxSamples);
    // A ROI with a negative extent (possible with half_pixel) samples nothing: its bins are 0.
    // Compared as doubles first: a grid of -1e30 (a huge negative extent) has no int64 value.
    const int64_t gh = grid_h > 0.0 ? int64_t(grid_h) : 0, gw = grid_w > 0.0 ? int64_t(grid_w) : 0;
    const double count = double(std::max<int64_t>(gh * gw, 1));
    // Sample g (row-major in the gh x gw grid) of bin p (row-major in oh x ow).
    auto sample_at = [&](int64_t p, int64_t g) {
      const int64_t ph = p / ow_, pw = p % ow_, iy = g / gw, ix = g % gw;
      const double yy = y0 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
      double xx = x0 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw), yv = yy;
      Sample s{};
      if (yv < -1.0 || yv > double(H) || xx < -1.0 || xx > double(W)) return s;
      yv = std::max(yv, 0.0);
      xx = std::max(xx, 0.0);
      int64_t yl = int64_t(yv), xl = int64_t(xx), yh, xh;
      if (yl >= H - 1)
        yh = yl = H - 1, yv = double(yl);
      else
        yh = yl + 1;
      if (xl >= W - 1)
        xh = xl = W - 1, xx = double(xl);
      else
        xh = xl + 1;
      const double ly = yv - double(yl), lx = xx - double(xl), hy = 1 - ly, hx = 1 - lx;
      return Sample{{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh},
                    {hy * hx, hy * lx, ly * hx, ly * lx}};
    };
    auto add = [&](double& v, char& first, const T* plane, const Sample& s) {
      if (max_) {
        double m = s.w[0] * double(plane[s.pos[0]]);
        for (int j = 1; j < 4; ++j) m = std::max(m, s.w[j] * double(plane[s.pos[j]]));
        v = first ? m : std::max(v, m);
        first = 0;
      } else {
        for (int j = 0; j < 4; ++j) v += s.w[j] * double(plane[s.pos[j]]);
      }
    };
    auto finish = [&](double v) { return T(acc_t<T>(max_ ? v : v / count)); };
    auto plane_of = [&](int64_t c) { return src + (batch * C + c) * H * W; };
    auto out_of = [&](int64_t c) { return dst + (n * C + c) * oh_ * ow_; };
    // The samples' positions and weights are computed once for all channels, in tables of at
    // most kTable consecutive samples (4 MiB; one table for the ROI took up to 2^26 samples,
    // 4 GiB). A bin may span tables: each channel's sum carries over until its last sample.
    // Every bin sums its samples in grid order.
    constexpr int64_t kTable = int64_t{1} << 16;
    const int64_t per_bin = gh * gw, total = oh_ * ow_ * per_bin;
    if (per_bin == 0)  // no sample in any bin: every bin is 0
      for (int64_t c = 0; c < C; ++c) std::fill(out_of(c), out_of(c) + oh_ * ow_, finish(0.0));
    std::vector<Sample> pre;
    pre.reserve(static_cast<size_t>(std::min(total, kTable)));
    std::vector<double> v(static_cast<size_t>(C), 0.0);
    std::vector<char> first(static_cast<size_t>(C), 1);
    for (int64_t s0 = 0; s0 < total; s0 += kTable) {
      const int64_t s1 = std::min(total, s0 + kTable);
      pre.clear();
      for (int64_t i = s0; i < s1; ++i) pre.push_back(sample_at(i / per_bin, i % per_bin));
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = plane_of(c);
        T* out = out_of(c);
        for (int64_t i = s0; i < s1; ++i) {
          add(v[c], first[c], plane, pre[static_cast<size_t>(i - s0)]);
          if ((i + 1) % per_bin == 0) {  // the bin's last sample
            out[i / per_bin] = finish(v[c]);
            v[c] = 0.0;
            first[c] = 1;
          }
        }
      }
    }
  }

  bool half_pixel_ = true, max_ = false;
  int64_t oh_ = 1, ow_ = 1, sampling_ = 0;
  double spatial_scale_ = 1;
};

// ---- NonMaxSuppression -----------------------------------------------------------------

class NonMaxSuppressionKernel final : public Kernel {
 public:
  explicit NonMaxSuppressionKernel(const KernelInfo& info)
      : center_(info.node.attr_int("center_point_box", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& boxes = ctx.required_input(0);
    const Tensor& scores = ctx.required_input(1);
    ONYX_CHECK(boxes.rank() == 3 && boxes.dim(2) == 4 && scores.rank() == 3 &&
                   scores.dim(0) == boxes.dim(0) && scores.dim(2) == boxes.dim(1),
               "[{}] boxes should be [B, N, 4] and scores [B, C, N], but they are {} and {}",
               ctx.label(), shape_str(boxes.shape()), shape_str(scores.shape()));
    auto scalar = [&](int i, double def, bool* given) {
      const Tensor* t = ctx.num_inputs() > i ? ctx.input(i) : nullptr;
      if (given) *given = t && t->numel() > 0;
      return t && t->numel() > 0 ? t->to_double_vector()[0] : def;
    };
    // Read as int64, not through double: INT64_MAX ("no limit") is 2^63 as a double.
    const Tensor* max_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const int64_t max_out =
        max_t && max_t->numel() > 0 ? std::max<int64_t>(0, max_t->to_int64_vector()[0]) : 0;
    const float iou_th = float(scalar(3, 0, nullptr));
    bool has_score_th = false;
    const float score_th = float(scalar(4, 0, &has_score_th));
    const int64_t B = boxes.dim(0), N = boxes.dim(1), C = scores.dim(1);
    std::vector<float> bx(boxes.numel()), sc(scores.numel());
    {
      const std::vector<double> b = boxes.to_double_vector(), s = scores.to_double_vector();
      std::copy(b.begin(), b.end(), bx.begin());
      std::copy(s.begin(), s.end(), sc.begin());
    }
    std::vector<int64_t> sel;
    std::vector<int64_t> order, kept;
    for (int64_t b = 0; b < B; ++b) {
      const float* bb = bx.data() + b * N * 4;
      for (int64_t c = 0; c < C; ++c) {
        const float* s = sc.data() + (b * C + c) * N;
        order.clear();
        for (int64_t i = 0; i < N; ++i)
          if (!has_score_th || s[i] > score_th) order.push_back(i);
        // Highest score first; equal scores keep the lower box index first.
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t d) { return s[a] > s[d]; });
        kept.clear();
        for (int64_t i : order) {
          if (int64_t(kept.size()) >= max_out) break;
          bool keep = true;
          for (int64_t k : kept)
            if (suppress(bb + i * 4, bb + k * 4, iou_th)) {
              keep = false;
              break;
            }
          if (!keep) continue;
          kept.push_back(i);
          sel.insert(sel.end(), {b, c, i});
        }
      }
    }
    Tensor& y = ctx.allocate_output(0, DataType::Int64, {int64_t(sel.size() / 3), 3});
    std::copy(sel.begin(), sel.end(), y.data<int64_t>());
  }

 private:
  // Corners (min, max) of a box along x and y.
  void corners(const float* b, float* x0, float* x1, float* y0, float* y1) const {
    if (center_) {
      *x0 = b[0] - b[2] / 2, *x1 = b[0] + b[2] / 2;
      *y0 = b[1] - b[3] / 2, *y1 = b[1] + b[3] / 2;
    } else {
      *x0 = std::min(b[1], b[3]), *x1 = std::max(b[1], b[3]);
      *y0 = std::min(b[0], b[2]), *y1 = std::max(b[0], b[2]);
    }
  }

  bool suppress(const float* a, const float* b, float th) const {
    float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    corners(a, &ax0, &ax1, &ay0, &ay1);
    corners(b, &bx0, &bx1, &by0, &by1);
    const float ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1);
    if (ix1 <= ix0) return false;
    const float iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
    if (iy1 <= iy0) return false;
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    const float a1 = (ax1 - ax0) * (ay1 - ay0), a2 = (bx1 - bx0) * (by1 - by0);
    const float uni = a1 + a2 - inter;
    if (inter <= 0 || a1 <= 0 || a2 <= 0 || uni <= 0) return false;
    return inter / uni > th;
  }

  bool center_;
};

// ---- DeformConv (2-D) ------------------------------------------------------------------

class DeformConvKernel final : public Kernel {
 public:
  explicit DeformConvKernel(const KernelInfo& info)
      : dilations_(info.node.attr_ints("dilations")),
        pads_(info.node.attr_ints("pads")),
        strides_(info.node.attr_ints("strides")),
        group_(info.node.attr_int("group", 1)),
        offset_group_(info.node.attr_int("offset_group", 1)) {
    // Checked once here, so compute() may index them (2-D only: two dilations and strides,
    // four pads); a short list was read past its end before.
    if (dilations_.empty()) dilations_ = {1, 1};
    if (strides_.empty()) strides_ = {1, 1};
    if (pads_.empty()) pads_ = {0, 0, 0, 0};
    auto check = [&](const char* name, const std::vector<int64_t>& v, size_t n, int64_t lo) {
      ONYX_CHECK(v.size() == n, "[{}] attribute '{}' should hold {} values for 2-D DeformConv but holds [{}]",
                 info.label(), name, n, fmt::join(v, ", "));
      check_attr_values(info.label(), name, v, lo, int64_t{1} << 32);
    };
    check("dilations", dilations_, 2, 1);
    check("strides", strides_, 2, 1);
    check("pads", pads_, 4, 0);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& w = ctx.required_input(1);
    const Tensor& offset = ctx.required_input(2);
    const Tensor* bias = ctx.input(3);
    const Tensor* mask = ctx.input(4);
    ONYX_CHECK(x.rank() == 4 && w.rank() == 4 && offset.rank() == 4,
               "[{}] only 2-D DeformConv is supported: X {}, W {}, offset {}", ctx.label(),
               shape_str(x.shape()), shape_str(w.shape()), shape_str(offset.shape()));
    const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
    const int64_t M = w.dim(0), kh = w.dim(2), kw = w.dim(3), G = group_, OG = offset_group_;
    const int64_t oh = offset.dim(2), ow = offset.dim(3), kp = kh * kw, P = oh * ow;
    ONYX_CHECK(G > 0 && OG > 0 && C == w.dim(1) * G && M % G == 0 && C % OG == 0,
               "[{}] W {} does not fit X {} with group {} and offset_group {}", ctx.label(),
               shape_str(w.shape()), shape_str(x.shape()), G, OG);
    ONYX_CHECK(offset.dim(0) == N && offset.dim(1) == OG * kp * 2,
               "[{}] offset should have shape [{}, {}, oH, oW] but has {}", ctx.label(), N,
               OG * kp * 2, shape_str(offset.shape()));
    ONYX_CHECK(!mask || mask->shape() == Shape({N, OG * kp, oh, ow}),
               "[{}] mask should have shape [{}, {}, {}, {}] but has {}", ctx.label(), N, OG * kp,
               oh, ow, shape_str(mask ? mask->shape() : Shape{}));
    ONYX_CHECK(!bias || bias->numel() == M, "[{}] B should have {} values but has {}", ctx.label(),
               M, bias ? bias->numel() : 0);
    const std::vector<int64_t>& d = dilations_, &s = strides_, &p = pads_;
    const int64_t eh = (H + p[0] + p[2] - ((kh - 1) * d[0] + 1)) / s[0] + 1;
    const int64_t ew = (W + p[1] + p[3] - ((kw - 1) * d[1] + 1)) / s[1] + 1;
    ONYX_CHECK(oh == eh && ow == ew, "[{}] offset spatial shape [{}, {}] should be [{}, {}]",
               ctx.label(), oh, ow, eh, ew);
    Tensor& y = ctx.allocate_output(0, x.dtype(), {N, M, oh, ow});
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      const T* xs = x.data<T>();
      const T* ws = w.data<T>();
      const T* os = offset.data<T>();
      const T* ms = mask ? mask->data<T>() : nullptr;
      const T* bs = bias ? bias->data<T>() : nullptr;
      T* ys = y.data<T>();
      const int64_t cg = C / G, mg = M / G, cog = C / OG;
      for (int64_t n = 0; n < N; ++n) {
        // col[(c * kp + k) * P + q]: the masked bilinear sample feeding tap k at output q.
        std::vector<A> col(C * kp * P);
        parallel_for(C, ctx.threads(), 1, [&](int64_t cb, int64_t ce) {
          for (int64_t c = cb; c < ce; ++c) {
            const int64_t g = c / cog;
            const T* plane = xs + (n * C + c) * H * W;
            for (int64_t k = 0; k < kp; ++k) {
              const int64_t ki = k / kw, kj = k % kw;
              const T* oy = os + ((n * OG + g) * kp * 2 + k * 2) * P;
              const T* ox = oy + P;
              const T* mk = ms ? ms + ((n * OG + g) * kp + k) * P : nullptr;
              for (int64_t q = 0; q < P; ++q) {
                const int64_t i = q / ow, j = q % ow;
                const A py = A(-p[0] + i * s[0] + ki * d[0]) + A(oy[q]);
                const A px = A(-p[1] + j * s[1] + kj * d[1]) + A(ox[q]);
                A v = bilinear(plane, H, W, py, px);
                if (mk) v *= A(mk[q]);
                col[(c * kp + k) * P + q] = v;
              }
            }
          }
        });
        parallel_for(M, ctx.threads(), 1, [&](int64_t mb, int64_t me) {
          std::vector<A> acc(P);
          for (int64_t m = mb; m < me; ++m) {
            const int64_t g = m / mg;
            std::fill(acc.begin(), acc.end(), bs ? A(bs[m]) : A(0));
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t k = 0; k < kp; ++k) {
                const A wv = A(ws[(m * cg + c) * kp + k]);
                const A* cr = col.data() + ((g * cg + c) * kp + k) * P;
                for (int64_t q = 0; q < P; ++q) acc[q] += wv * cr[q];
              }
            for (int64_t q = 0; q < P; ++q) ys[(n * M + m) * P + q] = T(acc[q]);
          }
        });
      }
    });
  }

 private:
  // Bilinear sample at (y, x); pixels outside the image read as zero.
  template <typename T, typename A = acc_t<T>>
  static A bilinear(const T* plane, int64_t H, int64_t W, A y, A x) {
    const int64_t y0 = floor_index(double(y)), x0 = floor_index(double(x));
    const A ly = y - A(y0), lx = x - A(x0);
    auto at = [&](int64_t r, int64_t c) {
      return (r >= 0 && r < H && c >= 0 && c < W) ? A(plane[r * W + c]) : A(0);
    };
    return (A(1) - ly) * ((A(1) - lx) * at(y0, x0) + lx * at(y0, x0 + 1)) +
           ly * ((A(1) - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1));
  }

  std::vector<int64_t> dilations_, pads_, strides_;
  int64_t group_, offset_group_;
};

// ---- BitCast ---------------------------------------------------------------------------

int bit_width(DataType t) {
  switch (t) {
    case DataType::Int4:
    case DataType::UInt4:
    case DataType::Float4E2M1:
      return 4;
    case DataType::Int2:
    case DataType::UInt2:
      return 2;
    default:
      return int(dtype_size(t)) * 8;
  }
}

class BitCastKernel final : public Kernel {
 public:
  explicit BitCastKernel(const KernelInfo& info)
      : to_(static_cast<DataType>(info.node.require_attr("to", Attribute::Type::Int).i)) {
    ONYX_CHECK(
        dtype_is_known(int32_t(to_)) && to_ != DataType::String && to_ != DataType::Undefined,
        "[{}] cannot bit-cast to dtype {}", info.label(), int(to_));
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.dtype() != DataType::String, "[{}] cannot bit-cast strings", ctx.label());
    ONYX_CHECK(bit_width(x.dtype()) == bit_width(to_), "[{}] input {} has {} bits but {} has {}",
               ctx.label(), dtype_name(x.dtype()), bit_width(x.dtype()), dtype_name(to_),
               bit_width(to_));
    if (!is_sub_byte(x.dtype()) && x.dtype() != DataType::Bool && to_ != DataType::Bool) {
      ctx.set_output(0, Datum(Tensor(to_, x.shape(), x.storage(), x.offset())));
      return;
    }
    // Unpacked sub-byte values and bools: re-encode the low bits per element.
    Tensor& y = ctx.allocate_output(0, to_, x.shape());
    const uint8_t* src = x.data_as<uint8_t>();
    uint8_t* dst = y.data_as<uint8_t>();
    const int bits = bit_width(to_);
    const uint8_t low = uint8_t((1u << std::min(bits, 8)) - 1u);
    const bool sign = to_ == DataType::Int4 || to_ == DataType::Int2;
    for (int64_t i = 0; i < x.numel(); ++i) {
      uint8_t v = uint8_t(src[i] & low);
      if (sign && (v >> (bits - 1)) & 1) v = uint8_t(v | ~low);
      if (to_ == DataType::Bool) v = v != 0;
      dst[i] = v;
    }
  }

 private:
  DataType to_;
};

}  // namespace

void register_image_kernels(KernelRegistry& r) {
  const auto movable = movable_types();
  r.add({"CenterCropPad", "", 18, INT_MAX, "cpu", 0, movable, make_factory<CenterCropPadKernel>()});
  r.add({"Col2Im", "", 18, INT_MAX, "cpu", 0, numeric_types(), make_factory<Col2ImKernel>()});
  r.add({"MaxUnpool", "", 9, INT_MAX, "cpu", 0, float_types(), make_factory<MaxUnpoolKernel>()});
  r.add({"RoiAlign", "", 10, INT_MAX, "cpu", 0, float_types(), make_factory<RoiAlignKernel>()});
  r.add({"NonMaxSuppression",
         "",
         10,
         INT_MAX,
         "cpu",
         0,
         {DataType::Float},
         make_factory<NonMaxSuppressionKernel>()});
  r.add({"DeformConv", "", 19, INT_MAX, "cpu", 0, float_types(), make_factory<DeformConvKernel>()});
  r.add({"BitCast", "", 26, INT_MAX, "cpu", -1, {}, make_factory<BitCastKernel>()});
}

}  // namespace onyx::cpu
