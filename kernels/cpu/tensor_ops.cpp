// Layout CPU kernels that copy data into a new arrangement: Expand, Tile, Transpose,
// DepthToSpace, SpaceToDepth, Concat, Split, Slice, Pad, Trilu, ReverseSequence.
// All move elements by byte width (dispatch_move), so they serve every dtype.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "graph/saturate_cast.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/movement_plan.h"
#include "kernels/slice_plan.h"
#include "kernels/cpu/move_util.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements per thread below which copies run inline

/// Merges adjacent dims that are contiguous in the source and drops size-1 dims, so the
/// innermost loop of a strided copy is as long as possible.
void coalesce(Shape& shape, std::vector<int64_t>& strides) {
  Shape s;
  std::vector<int64_t> st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  shape = std::move(s);
  strides = std::move(st);
}

/// dst (contiguous, `shape`) = src read with element `strides` (0 broadcasts, negative
/// reverses). Rows of the last dim are split over threads.
template <typename T>
void strided_copy(const T* src, T* dst, Shape shape, std::vector<int64_t> strides, int threads) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  coalesce(shape, strides);
  if (shape.empty()) {
    std::fill_n(dst, n, *src);
    return;
  }
  size_t r = shape.size();
  int64_t inner = shape[r - 1], is = strides[r - 1], rows = n / inner;
  parallel_for(rows, threads, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(r, 0);
    int64_t off = 0;
    for (size_t d = r - 1, t = static_cast<size_t>(b); d-- > 0;) {
      idx[d] = static_cast<int64_t>(t) % shape[d];
      t /= static_cast<size_t>(shape[d]);
      off += idx[d] * strides[d];
    }
    for (int64_t row = b; row < e; ++row) {
      const T* s = src + off;
      T* o = dst + row * inner;
      if (is == 1) {
        std::copy_n(s, inner, o);
      } else if (is == 0) {
        std::fill_n(o, inner, *s);
      } else {
        for (int64_t j = 0; j < inner; ++j) o[j] = s[j * is];
      }
      for (size_t d = r - 1; d-- > 0;) {
        off += strides[d];
        if (++idx[d] < shape[d]) break;
        off -= strides[d] * shape[d];
        idx[d] = 0;
      }
    }
  });
}

/// Copies `rows` rows of `cols` elements between pitched buffers, split over threads.
template <typename T>
void copy_rows(const T* src, int64_t src_pitch, T* dst, int64_t dst_pitch, int64_t rows,
               int64_t cols, int threads) {
  if (rows == 0 || cols == 0) return;
  parallel_for(rows * cols, threads, kGrain, [&](int64_t b, int64_t e) {
    while (b < e) {
      int64_t r = b / cols, c = b % cols, len = std::min(cols - c, e - b);
      std::copy_n(src + r * src_pitch + c, len, dst + r * dst_pitch + c);
      b += len;
    }
  });
}

/// Batched 2-D transpose in cache-sized tiles: dst[n, a, b] = src[n_off + a + b * sb].
template <typename T>
void tiled_transpose(const T* src, T* dst, const Shape& batch, const std::vector<int64_t>& bstr,
                     int64_t A, int64_t B, int64_t sb, int threads) {
  constexpr int64_t kTile = 32;
  int64_t nb = shape_numel(batch), ta = (A + kTile - 1) / kTile;
  parallel_for(nb * ta, threads, std::max<int64_t>(1, kGrain / (kTile * B)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t w = lo; w < hi; ++w) {
                   int64_t n = w / ta, a0 = (w % ta) * kTile, a1 = std::min(A, a0 + kTile), off = 0;
                   for (size_t d = batch.size(), t = static_cast<size_t>(n); d-- > 0;) {
                     off += static_cast<int64_t>(t % static_cast<size_t>(batch[d])) * bstr[d];
                     t /= static_cast<size_t>(batch[d]);
                   }
                   const T* s = src + off;
                   T* o = dst + n * A * B;
                   for (int64_t b0 = 0; b0 < B; b0 += kTile) {
                     int64_t b1 = std::min(B, b0 + kTile);
                     for (int64_t a = a0; a < a1; ++a)
                       for (int64_t b = b0; b < b1; ++b) o[a * B + b] = s[a + b * sb];
                   }
                 }
               });
}

/// dst = src (contiguous, `in_shape`) with its axes permuted by `perm`.
template <typename T>
void transpose_copy(const T* src, T* dst, const Shape& in_shape, const std::vector<int64_t>& perm,
                    int threads) {
  auto in_strides = contiguous_strides(in_shape);
  Shape shape;
  std::vector<int64_t> strides;
  for (int64_t p : perm) {
    shape.push_back(in_shape[static_cast<size_t>(p)]);
    strides.push_back(in_strides[static_cast<size_t>(p)]);
  }
  int64_t n = shape_numel(shape);
  coalesce(shape, strides);
  size_t r = shape.size();
  if (n > 0 && r >= 2 && strides[r - 2] == 1 && strides[r - 1] != 1) {
    Shape batch(shape.begin(), shape.end() - 2);
    std::vector<int64_t> bstr(strides.begin(), strides.end() - 2);
    tiled_transpose(src, dst, batch, bstr, shape[r - 2], shape[r - 1], strides[r - 1], threads);
    return;
  }
  strided_copy(src, dst, shape, strides, threads);
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(const KernelInfo& info)
      : perm_(info.node.attr_ints("perm")), reverse_(!info.node.has_attr("perm")) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Shape out;
    std::vector<int64_t> perm = transpose_perm(ctx.label(), perm_, reverse_, x.shape(), out);
    // A permutation that only moves dims of size 1 keeps every element where it is: the output
    // is a view ([1, 128, 768] -> [128, 1, 768], twice per layer of a torch attention export).
    int64_t last = -1;
    bool same_order = true;
    for (int64_t axis : perm) {
      if (x.shape()[static_cast<size_t>(axis)] == 1) continue;
      same_order = same_order && axis > last;
      last = axis;
    }
    if (same_order) {
      ctx.set_output(0, Datum(x.reshape(out)));
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      transpose_copy(x.data_as<T>(), y.data_as<T>(), x.shape(), perm, ctx.threads());
    });
  }

 private:
  std::vector<int64_t> perm_;
  bool reverse_;  // no perm attribute; an empty one given is a rank-0 input's perm
};

/// DepthToSpace and SpaceToDepth: a reshape to 6-D, a transpose, a reshape back.
class SpaceDepthKernel final : public Kernel {
 public:
  SpaceDepthKernel(const KernelInfo& info, bool to_space)
      : to_space_(to_space),
        crd_(info.node.attr_string("mode", "DCR") == "CRD"),
        b_(info.node.require_attr("blocksize", Attribute::Type::Int).i) {
    // b * b (and H * b, W * b) must not overflow int64; 2^31 - 1 keeps b * b in range.
    ONYX_CHECK(b_ > 0 && b_ <= INT32_MAX,
               "[{}] attribute 'blocksize' holds {}, outside [1, {}]", info.label(), b_, INT32_MAX);
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() == 4, "[{}] input should be 4-D (N, C, H, W) but has shape {}", ctx.label(),
               shape_str(x.shape()));
    int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], b = b_;
    Shape view, out;
    std::vector<int64_t> perm;
    if (to_space_) {
      ONYX_CHECK(C % (b * b) == 0, "[{}] channels {} are not a multiple of blocksize^2 = {}",
                 ctx.label(), C, b * b);
      int64_t c = C / (b * b);
      view = crd_ ? Shape{N, c, b, b, H, W} : Shape{N, b, b, c, H, W};
      perm = crd_ ? std::vector<int64_t>{0, 1, 4, 2, 5, 3} : std::vector<int64_t>{0, 3, 4, 1, 5, 2};
      out = {N, c, H * b, W * b};
    } else {
      ONYX_CHECK(H % b == 0 && W % b == 0, "[{}] spatial dims {}x{} are not multiples of {}",
                 ctx.label(), H, W, b);
      view = {N, C, H / b, b, W / b, b};
      perm = {0, 3, 5, 1, 2, 4};
      out = {N, C * b * b, H / b, W / b};
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      transpose_copy(x.data_as<T>(), y.data_as<T>(), view, perm, ctx.threads());
    });
  }

 private:
  bool to_space_, crd_;
  int64_t b_;
};

void expand_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const ExpandPlan p = plan_expand(ctx, x.shape());
  Tensor& y = ctx.allocate_output(0, x.dtype(), p.out);
  dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
    strided_copy(x.data_as<T>(), y.data_as<T>(), p.out, p.strides, ctx.threads());
  });
}

/// y = x repeated out[i] / x.shape[i] times along each axis i. x is written once into the
/// corner of y (rows of its last axis), then, from the last axis to the first, each block
/// already complete is copied after itself: every copy is a contiguous run, however short x's
/// rows are (an element-wise strided walk spent ~15 ns per element on [4, 1, 19, 1] tiled
/// [5, 65282, 3, 4], found by the model fuzz target as a timeout).
template <typename T>
void tile(const T* x, T* y, const Shape& in, const Shape& out, int threads) {
  const size_t r = in.size();
  if (r == 0) {
    y[0] = x[0];
    return;
  }
  const std::vector<int64_t> ys = contiguous_strides(out);
  // Offset in y of the k-th combination of x's indices over axes [0, upto) (repeat index 0),
  // and how many combinations there are.
  auto corner = [&](int64_t k, size_t upto) {
    int64_t off = 0;
    for (size_t j = upto; j-- > 0;) {
      off += (k % in[j]) * ys[j];
      k /= in[j];
    }
    return off;
  };
  auto corners = [&](size_t upto) {
    int64_t n = 1;
    for (size_t j = 0; j < upto; ++j) n *= in[j];
    return n;
  };
  // x into the corner: one run of its last axis per combination of the others.
  const int64_t row = in[r - 1];
  parallel_for(corners(r - 1), threads, std::max<int64_t>(1, kGrain / row), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) std::copy_n(x + k * row, row, y + corner(k, r - 1));
  });
  // Axis d: the block [in[d] * ys[d]] at each corner of the axes before it, complete along the
  // axes after it, is repeated out[d] / in[d] times.
  for (size_t d = r; d-- > 0;) {
    const int64_t reps = out[d] / in[d];
    if (reps <= 1) continue;
    const int64_t block = in[d] * ys[d];
    parallel_for(corners(d), threads, std::max<int64_t>(1, kGrain / (block * reps)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t k = b; k < e; ++k) {
                     T* from = y + corner(k, d);
                     for (int64_t t = 1; t < reps; ++t) std::copy_n(from, block, from + t * block);
                   }
                 });
  }
}

void tile_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  Shape out;
  tile_repeats(ctx, x.shape(), out);
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
    tile(x.data_as<T>(), y.data_as<T>(), x.shape(), out, ctx.threads());
  });
}

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) : axis_(concat_axis_attr(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& first = ctx.required_input(0);
    const ConcatPlan p = plan_concat(ctx, axis_);
    const Shape& out = p.out;
    const size_t a = p.axis;
    const int64_t outer = p.outer, inner = p.inner;
    Tensor& y = ctx.allocate_output(0, first.dtype(), out);
    int64_t pitch = out[a] * inner, col = 0;
    dispatch_move(first.dtype(), ctx.label(), [&]<typename T>() {
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const Tensor& t = ctx.required_input(i);
        int64_t cols = t.shape()[a] * inner;
        copy_rows(t.data_as<T>(), cols, y.data_as<T>() + col, pitch, outer, cols, ctx.threads());
        col += cols;
      }
    });
  }

 private:
  int64_t axis_;
};

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(const KernelInfo& info) : attrs_(info) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const SplitPlan p = plan_split(ctx, attrs_, x.shape());
    const size_t a = p.axis;
    const int64_t dim = x.shape()[a], n = ctx.num_outputs(), outer = p.outer, inner = p.inner;
    const std::vector<int64_t>& sizes = p.sizes;
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      int64_t col = 0;
      for (int i = 0; i < n; ++i) {
        Shape s = x.shape();
        s[a] = sizes[static_cast<size_t>(i)];
        int64_t cols = s[a] * inner;
        if (ctx.output_wanted(i)) {
          Tensor& y = ctx.allocate_output(i, x.dtype(), s);
          copy_rows(x.data_as<T>() + col, dim * inner, y.data_as<T>(), cols, outer, cols,
                    ctx.threads());
        }
        col += cols;
      }
    });
  }

 private:
  SplitAttrs attrs_;
};

void slice_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const SlicePlan p = plan_slice(ctx, x.shape());
  const Shape& out = p.shape;
  const int64_t base = p.base;
  const std::vector<int64_t>& strides = p.strides;
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
    strided_copy(x.data_as<T>() + base, y.data_as<T>(), out, strides, ctx.threads());
  });
}

class PadKernel final : public Kernel {
 public:
  explicit PadKernel(const KernelInfo& info) : mode_(parse_pad_mode(info)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const int64_t r = x.rank();
    const PadPlan plan = plan_pad(ctx, x.shape(), mode_ == PadMode::Constant);
    const Shape& out = plan.out;
    const std::vector<int64_t>& before = plan.before;
    // The output is taken (and its size checked) before the index maps: an empty output with a
    // huge padded axis needs no map.
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(r));
    for (size_t a = 0; a < out.size(); ++a) {
      maps[a].resize(static_cast<size_t>(out[a]));
      for (int64_t o = 0; o < out[a]; ++o)
        maps[a][static_cast<size_t>(o)] = source_index(o - before[a], x.shape()[a]);
    }
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      T value = pad_value<T>(ctx, x.dtype());
      pad<T>(x.data_as<T>(), y.data_as<T>(), x.shape(), out, maps, before, value, ctx.threads());
    });
  }

 private:
  /// Where output index i (relative to the input's start) reads from; -1: the pad value.
  int64_t source_index(int64_t i, int64_t d) const {
    if (i >= 0 && i < d) return i;
    switch (mode_) {
      case PadMode::Constant:
        return -1;
      case PadMode::Edge:
        return i < 0 ? 0 : d - 1;
      case PadMode::Wrap:
        return ((i % d) + d) % d;
      case PadMode::Reflect: {
        if (d == 1) return 0;
        int64_t p = 2 * (d - 1), m = ((i % p) + p) % p;
        return m < d ? m : p - m;
      }
    }
    return -1;
  }

  template <typename T>
  T pad_value(const KernelContext& ctx, DataType dt) const {
    const Tensor* v = ctx.input(2);
    if (!v || v->numel() == 0) return T{};
    ONYX_CHECK(v->numel() == 1, "[{}] constant_value should be a scalar but has shape {}",
               ctx.label(), shape_str(v->shape()));
    if (v->dtype() == dt) return *v->data_as<T>();
    // An old-opset value converted to the data's dtype.
    T out{};
    if constexpr (!std::is_same_v<T, std::string>) {
      double d = v->to_double_vector()[0];
      Tensor t = Tensor::zeros(dt, {});
      dispatch<NumericTypes>(dt, ctx.label(), [&]<typename U>() {
        *t.data<U>() = U(saturate_cast<acc_t<U>>(d));  // 1e30 or NaN on integer data
      });
      out = *t.data_as<T>();
    }
    return out;
  }

  template <typename T>
  static void pad(const T* src, T* dst, const Shape& in, const Shape& out,
                  const std::vector<std::vector<int64_t>>& maps, const std::vector<int64_t>& before,
                  T value, int threads) {
    int64_t n = shape_numel(out);
    if (n == 0) return;
    if (out.empty()) {
      dst[0] = src[0];
      return;
    }
    size_t r = out.size();
    auto xs = contiguous_strides(in);
    int64_t W = out[r - 1], d = in[r - 1], rows = n / W;
    int64_t lo = std::clamp<int64_t>(before[r - 1], 0, W),
            hi = std::clamp<int64_t>(before[r - 1] + d, lo, W);
    const auto& inner_map = maps[r - 1];
    parallel_for(rows, threads, std::max<int64_t>(1, kGrain / W), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        T* o = dst + row * W;
        int64_t off = 0;
        bool fill = false;
        for (size_t a = r - 1, t = static_cast<size_t>(row); a-- > 0;) {
          int64_t m = maps[a][t % static_cast<size_t>(out[a])];
          t /= static_cast<size_t>(out[a]);
          fill |= m < 0;
          off += m * xs[a];
        }
        if (fill) {
          std::fill_n(o, W, value);
          continue;
        }
        const T* s = src + off;
        for (int64_t j = 0; j < lo; ++j) o[j] = inner_map[j] < 0 ? value : s[inner_map[j]];
        std::copy_n(s + (lo - before[r - 1]), hi - lo, o + lo);
        for (int64_t j = hi; j < W; ++j) o[j] = inner_map[j] < 0 ? value : s[inner_map[j]];
      }
    });
  }

  PadMode mode_ = PadMode::Constant;
};

class TriluKernel final : public Kernel {
 public:
  explicit TriluKernel(const KernelInfo& info) : upper_(info.node.attr_int("upper", 1) != 0) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 2, "[{}] input should have rank >= 2 but has shape {}", ctx.label(),
               shape_str(x.shape()));
    int64_t k = 0;
    if (const Tensor* t = ctx.input(1)) {
      ONYX_CHECK(t->numel() == 1, "[{}] k should be a scalar but has shape {}", ctx.label(),
                 shape_str(t->shape()));
      // Past every dimension any k acts the same; clamped so i + k + 1 cannot overflow.
      k = std::clamp<int64_t>(t->to_int64_vector()[0], -(int64_t{1} << 62), int64_t{1} << 62);
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    int64_t N = x.dim(-2), M = x.dim(-1), rows = x.numel() / std::max<int64_t>(1, M);
    if (M == 0) return;
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      parallel_for(
          rows, ctx.threads(), std::max<int64_t>(1, kGrain / M), [&](int64_t b, int64_t e) {
            for (int64_t row = b; row < e; ++row) {
              int64_t i = row % N, edge = std::clamp<int64_t>(upper_ ? i + k : i + k + 1, 0, M);
              // upper keeps columns >= i + k; lower keeps columns <= i + k.
              int64_t z0 = upper_ ? 0 : edge, z1 = upper_ ? edge : M;
              std::copy_n(s + row * M, M, o + row * M);
              std::fill(o + row * M + z0, o + row * M + z1, T{});
            }
          });
    });
  }

 private:
  bool upper_;
};

class ReverseSequenceKernel final : public Kernel {
 public:
  explicit ReverseSequenceKernel(const KernelInfo& info)
      : time_axis_(info.node.attr_int("time_axis", 0)),
        batch_axis_(info.node.attr_int("batch_axis", 1)) {
    ONYX_CHECK((time_axis_ == 0 && batch_axis_ == 1) || (time_axis_ == 1 && batch_axis_ == 0),
               "[{}] time_axis and batch_axis should be 0 and 1 (in either order), got {} and {}",
               info.label(), time_axis_, batch_axis_);
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() >= 2, "[{}] input should have rank >= 2 but has shape {}", ctx.label(),
               shape_str(x.shape()));
    int64_t T_ = x.shape()[static_cast<size_t>(time_axis_)],
            B = x.shape()[static_cast<size_t>(batch_axis_)];
    auto lens = ctx.required_input(1).to_int64_vector();
    ONYX_CHECK(static_cast<int64_t>(lens.size()) == B,
               "[{}] sequence_lens has {} values for batch {}", ctx.label(), lens.size(), B);
    for (int64_t l : lens)
      ONYX_CHECK(l >= 0 && l <= T_, "[{}] sequence length {} is outside [0, {}]", ctx.label(), l,
                 T_);
    int64_t inner = dims_product(x.shape(), 2, x.shape().size());
    int64_t ts = time_axis_ == 0 ? B * inner : inner, bs = time_axis_ == 0 ? inner : T_ * inner;
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T_; ++t) {
          int64_t st = t < lens[static_cast<size_t>(b)] ? lens[static_cast<size_t>(b)] - 1 - t : t;
          std::copy_n(s + st * ts + b * bs, inner, o + t * ts + b * bs);
        }
    });
  }

 private:
  int64_t time_axis_, batch_axis_;
};

}  // namespace

void register_tensor_kernels(KernelRegistry& r) {
  auto any = stored_types(), classic = movable_types();
  r.add({"Transpose", "", 1, INT_MAX, "cpu", 0, any, make_factory<TransposeKernel>()});
  r.add({"DepthToSpace", "", 1, INT_MAX, "cpu", 0, classic,
         [](const KernelInfo& i) { return std::make_unique<SpaceDepthKernel>(i, true); }});
  r.add({"SpaceToDepth", "", 1, INT_MAX, "cpu", 0, classic,
         [](const KernelInfo& i) { return std::make_unique<SpaceDepthKernel>(i, false); }});
  r.add({"Expand", "", 8, INT_MAX, "cpu", 0, classic, function_factory(expand_compute)});
  r.add({"Tile", "", 6, INT_MAX, "cpu", 0, classic, function_factory(tile_compute)});
  r.add({"Concat", "", 1, INT_MAX, "cpu", 0, classic, make_factory<ConcatKernel>()});
  r.add({"Split", "", 1, INT_MAX, "cpu", 0, classic, make_factory<SplitKernel>()});
  r.add({"Slice", "", 1, INT_MAX, "cpu", 0, classic, function_factory(slice_compute)});
  r.add({"Pad", "", 1, INT_MAX, "cpu", 0, any, make_factory<PadKernel>()});
  r.add({"Trilu", "", 14, INT_MAX, "cpu", 0, classic, make_factory<TriluKernel>()});
  r.add({"ReverseSequence", "", 10, INT_MAX, "cpu", 0, classic,
         make_factory<ReverseSequenceKernel>()});
}

}  // namespace onyx::cpu
