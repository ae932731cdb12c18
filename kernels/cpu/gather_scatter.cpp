// Index-driven CPU kernels: Gather, GatherElements, GatherND, ScatterElements (and the
// deprecated Scatter), ScatterND, TensorScatter, OneHot, NonZero, Compress, Unique.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/index_checks.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/move_util.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

constexpr int64_t kGrain = 1 << 15;

/// Index tensor values, each checked to lie in [-dim, dim) and made non-negative.
std::vector<int64_t> checked_indices(const KernelContext& ctx, const Tensor& t, int64_t dim,
                                     const char* what) {
  ONYX_CHECK(t.dtype() == DataType::Int64 || t.dtype() == DataType::Int32,
             "[{}] {} should be int32 or int64 but is {}", ctx.label(), what,
             dtype_name(t.dtype()));
  auto v = t.to_int64_vector();
  for (int64_t& i : v) {
    ONYX_CHECK(i >= -dim && i < dim, "[{}] {} value {} is out of range [{}, {})", ctx.label(), what,
               i, -dim, dim);
    if (i < 0) i += dim;
  }
  return v;
}

class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    int64_t dim = x.shape()[a];
    auto idx = checked_indices(ctx, ind, dim, "indices");
    Shape out(x.shape().begin(), x.shape().begin() + static_cast<int64_t>(a));
    out.insert(out.end(), ind.shape().begin(), ind.shape().end());
    out.insert(out.end(), x.shape().begin() + static_cast<int64_t>(a) + 1, x.shape().end());
    int64_t outer = dims_product(x.shape(), 0, a),
            inner = dims_product(x.shape(), a + 1, x.shape().size());
    auto n = static_cast<int64_t>(idx.size());
    // One index into the outermost dim that is not 1 picks a contiguous block: the output is a
    // view of it (torch's attention export takes q, k and v from [3, seq, batch, dim] so).
    if (outer == 1 && n == 1 && x.dtype() != DataType::String && x.storage()) {
      const size_t offset = x.offset() + static_cast<size_t>(idx[0] * inner) * dtype_size(x.dtype());
      ctx.set_output(0, Datum(Tensor(x.dtype(), out, x.storage(), offset)));
      return;
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (inner == 0) return;
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      parallel_for(outer * n, ctx.threads(), std::max<int64_t>(1, kGrain / inner),
                   [&](int64_t b, int64_t e) {
                     for (int64_t w = b; w < e; ++w)
                       std::copy_n(s + ((w / n) * dim + idx[static_cast<size_t>(w % n)]) * inner,
                                   inner, o + w * inner);
                   });
    });
  }

 private:
  int64_t axis_;
};

using Reduction = ScatterReduction;

template <typename T>
void combine(T& d, const T& s, Reduction r) {
  if constexpr (std::is_same_v<T, std::string>) {
    d = s;
  } else {
    using A = acc_t<T>;
    switch (r) {
      case Reduction::None:
        d = s;
        break;
      case Reduction::Add:
        d = T(static_cast<A>(A(d) + A(s)));
        break;
      case Reduction::Mul:
        d = T(static_cast<A>(A(d) * A(s)));
        break;
      case Reduction::Max:
        d = A(s) > A(d) ? s : d;
        break;
      case Reduction::Min:
        d = A(s) < A(d) ? s : d;
        break;
    }
  }
}

/// combine() over n contiguous elements (d and s apart): plain writes as one copy, 16-bit
/// float sums and products in blocks widened to float.
template <typename T>
void combine_run(T* d, const T* s, int64_t n, Reduction r) {
  if (r == Reduction::None) {
    std::copy_n(s, n, d);
    return;
  }
  if constexpr (is_half_v<T>) {
    if (r == Reduction::Add || r == Reduction::Mul) {
      float bd[kHalfBlock], bs[kHalfBlock];
      for (int64_t i0 = 0; i0 < n; i0 += kHalfBlock) {
        const int64_t m = std::min(kHalfBlock, n - i0);
        widen(d + i0, bd, m);
        widen(s + i0, bs, m);
        if (r == Reduction::Add)
          for (int64_t i = 0; i < m; ++i) bd[i] += bs[i];
        else
          for (int64_t i = 0; i < m; ++i) bd[i] *= bs[i];
        narrow(bd, d + i0, m);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) combine(d[i], s[i], r);
}

/// Calls f<T>() with a byte-width type for plain writes, the real type for reductions.
template <typename F>
void dispatch_scatter(DataType dt, Reduction r, const std::string& who, F&& f) {
  if (r == Reduction::None)
    dispatch_move(dt, who, f);
  else
    dispatch<NumericBoolTypes>(dt, who, f);
}

/// Walks every element of `shape`, calling fn(linear, offset) where offset moves by
/// `strides` except along `axis`, whose contribution the caller adds.
template <typename F>
void walk(const Shape& shape, const std::vector<int64_t>& strides, size_t axis, F&& fn) {
  int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, off);
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t st = d == axis ? 0 : strides[d];
      off += st;
      if (++idx[d] < shape[d]) break;
      off -= st * shape[d];
      idx[d] = 0;
    }
  }
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    check_element_indices(ctx, x, ind);
    auto idx = checked_indices(ctx, ind, x.shape()[a], "indices");
    auto xs = contiguous_strides(x.shape());
    Tensor& y = ctx.allocate_output(0, x.dtype(), ind.shape());
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      walk(ind.shape(), xs, a,
           [&](int64_t i, int64_t off) { o[i] = s[off + idx[static_cast<size_t>(i)] * xs[a]]; });
    });
  }

 private:
  int64_t axis_;
};

/// output = data with updates written (or reduced) at positions given along `axis`.
class ScatterElementsKernel final : public Kernel {
 public:
  explicit ScatterElementsKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), red_(parse_scatter_reduction(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    const Tensor& upd = ctx.required_input(2);
    auto a = static_cast<size_t>(normalize_axis(axis_, x.rank(), ctx.label()));
    check_element_indices(ctx, x, ind);
    check_element_updates(ctx, x, ind, upd);
    auto idx = checked_indices(ctx, ind, x.shape()[a], "indices");
    auto xs = contiguous_strides(x.shape());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch_scatter(x.dtype(), red_, ctx.label(), [&]<typename T>() {
      T* o = y.data_as<T>();
      std::copy_n(x.data_as<T>(), x.numel(), o);
      const T* u = upd.data_as<T>();
      walk(ind.shape(), xs, a, [&](int64_t i, int64_t off) {
        combine(o[off + idx[static_cast<size_t>(i)] * xs[a]], u[i], red_);
      });
    });
  }

 private:
  int64_t axis_;
  Reduction red_;
};

class GatherNDKernel final : public Kernel {
 public:
  explicit GatherNDKernel(const KernelInfo& info) : batch_(info.node.attr_int("batch_dims", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    auto b = static_cast<size_t>(batch_);
    bool ok = batch_ >= 0 && batch_ < std::min(x.rank(), ind.rank());
    for (size_t d = 0; ok && d < b; ++d) ok = x.shape()[d] == ind.shape()[d];
    ONYX_CHECK(ok, "[{}] batch_dims {} does not fit data shape {} and indices shape {}",
               ctx.label(), batch_, shape_str(x.shape()), shape_str(ind.shape()));
    auto offs = nd_offsets(ctx, ind, x.shape(), b);
    auto k = static_cast<size_t>(ind.dim(-1));
    Shape out(ind.shape().begin(), ind.shape().end() - 1);
    out.insert(out.end(), x.shape().begin() + static_cast<int64_t>(b + k), x.shape().end());
    int64_t slice = dims_product(x.shape(), b + k, x.shape().size());
    int64_t batch_size = dims_product(x.shape(), b, x.shape().size());
    int64_t per_batch =
        static_cast<int64_t>(offs.size()) / std::max<int64_t>(1, dims_product(x.shape(), 0, b));
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    if (slice == 0) return;
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      auto n = static_cast<int64_t>(offs.size());
      parallel_for(n, ctx.threads(), std::max<int64_t>(1, kGrain / slice),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t i = lo; i < hi; ++i)
                       std::copy_n(s + (i / per_batch) * batch_size + offs[static_cast<size_t>(i)],
                                   slice, o + i * slice);
                   });
    });
  }

 private:
  int64_t batch_;
};

class ScatterNDKernel final : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelInfo& info) : red_(parse_scatter_reduction(info)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& ind = ctx.required_input(1);
    const Tensor& upd = ctx.required_input(2);
    auto offs = nd_offsets(ctx, ind, x.shape(), 0);
    auto k = static_cast<size_t>(ind.dim(-1));
    check_nd_updates(ctx, x, ind, k, upd);
    int64_t slice = dims_product(x.shape(), k, x.shape().size());
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch_scatter(x.dtype(), red_, ctx.label(), [&]<typename T>() {
      T* o = y.data_as<T>();
      std::copy_n(x.data_as<T>(), x.numel(), o);
      const T* u = upd.data_as<T>();
      for (size_t i = 0; i < offs.size(); ++i)
        combine_run(o + offs[i], u + static_cast<int64_t>(i) * slice, slice, red_);
    });
  }

 private:
  Reduction red_;
};

/// TensorScatter (KV-cache update): writes `update` into a copy of `past_cache` along `axis`,
/// starting per batch row at write_indices[b] (0 when omitted), wrapping when circular.
class TensorScatterKernel final : public Kernel {
 public:
  explicit TensorScatterKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", -2)) {
    std::string mode = info.node.attr_string("mode", "linear");
    ONYX_CHECK(mode == "linear" || mode == "circular",
               "[{}] mode should be 'linear' or 'circular' but is '{}'", info.label(), mode);
    circular_ = mode == "circular";
  }
  void compute(KernelContext& ctx) const override {
    const Tensor& past = ctx.required_input(0);
    const Tensor& upd = ctx.required_input(1);
    const Tensor* wi = ctx.input(2);
    auto a = static_cast<size_t>(normalize_axis(axis_, past.rank(), ctx.label()));
    ONYX_CHECK(a != 0, "[{}] axis must not be the batch axis 0", ctx.label());
    Shape want = past.shape();
    want[a] = upd.rank() == past.rank() ? upd.shape()[a] : -1;
    ONYX_CHECK(upd.dtype() == past.dtype() && upd.shape() == want && want[a] <= past.shape()[a],
               "[{}] update should be {} with shape {} except at most {} along axis {}, but is {}{}",
               ctx.label(), dtype_name(past.dtype()), shape_str(past.shape()), past.shape()[a], a,
               dtype_name(upd.dtype()), shape_str(upd.shape()));
    int64_t batch = past.shape()[0], max_len = past.shape()[a], len = upd.shape()[a];
    std::vector<int64_t> start(static_cast<size_t>(batch), 0);
    if (wi) {
      ONYX_CHECK(wi->dtype() == DataType::Int64 && wi->shape() == Shape{batch},
                 "[{}] write_indices should be int64 [{}] but is {}{}", ctx.label(), batch,
                 dtype_name(wi->dtype()), shape_str(wi->shape()));
      start = wi->to_int64_vector();
    }
    for (int64_t s : start)
      ONYX_CHECK(s >= 0 && (circular_ || s + len <= max_len),
                 "[{}] write index {} with {} updates does not fit a cache of length {}",
                 ctx.label(), s, len, max_len);
    int64_t outer = dims_product(past.shape(), 0, a);
    int64_t per_batch = outer / std::max<int64_t>(batch, 1);
    int64_t inner = dims_product(past.shape(), a + 1, past.shape().size());
    Tensor& y = ctx.allocate_output(0, past.dtype(), past.shape());
    dispatch_move(past.dtype(), ctx.label(), [&]<typename T>() {
      const T* p = past.data_as<T>();
      const T* u = upd.data_as<T>();
      T* o = y.data_as<T>();
      std::copy_n(p, past.numel(), o);
      for (int64_t r = 0; r < outer; ++r) {
        int64_t s0 = start[static_cast<size_t>(r / per_batch)];
        for (int64_t s = 0; s < len; ++s) {
          int64_t dst = circular_ ? (s0 + s) % max_len : s0 + s;
          std::copy_n(u + (r * len + s) * inner, inner, o + (r * max_len + dst) * inner);
        }
      }
    });
  }

 private:
  int64_t axis_;
  bool circular_ = false;
};

class OneHotKernel final : public Kernel {
 public:
  explicit OneHotKernel(const KernelInfo& info) : axis_(info.node.attr_int("axis", -1)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& ind = ctx.required_input(0);
    const Tensor& dep = ctx.required_input(1);
    const Tensor& vals = ctx.required_input(2);
    ONYX_CHECK(dep.numel() == 1, "[{}] depth should be a scalar but has shape {}", ctx.label(),
               shape_str(dep.shape()));
    ONYX_CHECK(vals.numel() == 2, "[{}] values should be [off, on] but has shape {}", ctx.label(),
               shape_str(vals.shape()));
    // depth and the indices may be floats: NaN or values past int64 are checked, not cast.
    const double depth_value = dep.to_double_vector()[0];
    ONYX_CHECK(depth_value >= 1 && depth_value <= double(int64_t{1} << 62),
               "[{}] depth {} should be in [1, 2^62]", ctx.label(), depth_value);
    const auto depth = static_cast<int64_t>(depth_value);
    auto a = static_cast<size_t>(normalize_axis(axis_, ind.rank() + 1, ctx.label()));
    Shape out = ind.shape();
    out.insert(out.begin() + static_cast<int64_t>(a), depth);
    int64_t inner = dims_product(ind.shape(), a, ind.shape().size());
    auto idx = ind.to_double_vector();
    Tensor& y = ctx.allocate_output(0, vals.dtype(), out);
    dispatch_move(vals.dtype(), ctx.label(), [&]<typename T>() {
      const T* v = vals.data_as<T>();
      T* o = y.data_as<T>();
      std::fill_n(o, y.numel(), v[0]);
      for (size_t p = 0; p < idx.size(); ++p) {
        if (!(std::abs(idx[p]) < double(depth))) continue;  // out of range or NaN: the row stays off
        auto i = static_cast<int64_t>(idx[p]);
        if (i < 0) i += depth;
        if (i < 0 || i >= depth) continue;  // out of range: the whole row stays off
        int64_t outer = static_cast<int64_t>(p) / inner, in = static_cast<int64_t>(p) % inner;
        o[(outer * depth + i) * inner + in] = v[1];
      }
    });
  }

 private:
  int64_t axis_;
};

void nonzero_compute(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  std::vector<int64_t> hits;
  dispatch<AllTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
    const T* s = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool nz;
      if constexpr (std::is_same_v<T, std::string>)
        nz = !s[i].empty();
      else
        nz = static_cast<acc_t<T>>(s[i]) != acc_t<T>(0);
      if (nz) hits.push_back(i);
    }
  });
  // A scalar counts as a 1-D tensor of one element, as numpy.nonzero does.
  Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  auto r = static_cast<int64_t>(shape.size()), n = static_cast<int64_t>(hits.size());
  int64_t* o = ctx.allocate_output(0, DataType::Int64, {r, n}).data<int64_t>();
  auto strides = contiguous_strides(shape);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < r; ++d)
      o[d * n + j] = (hits[static_cast<size_t>(j)] / strides[static_cast<size_t>(d)]) %
                     shape[static_cast<size_t>(d)];
}

class CompressKernel final : public Kernel {
 public:
  explicit CompressKernel(const KernelInfo& info)
      : has_axis_(info.node.has_attr("axis")), axis_(info.node.attr_int("axis", 0)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor& c = ctx.required_input(1);
    ONYX_CHECK(c.dtype() == DataType::Bool && c.rank() == 1,
               "[{}] condition should be a 1-D bool tensor but is {}{}", ctx.label(),
               dtype_name(c.dtype()), shape_str(c.shape()));
    Shape shape = has_axis_ ? x.shape() : Shape{x.numel()};
    auto a = static_cast<size_t>(has_axis_ ? normalize_axis(axis_, x.rank(), ctx.label()) : 0);
    int64_t dim = shape[a];
    const bool* cond = c.data<bool>();
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (!cond[i]) continue;
      ONYX_CHECK(i < dim, "[{}] condition selects index {} beyond axis size {}", ctx.label(), i,
                 dim);
      keep.push_back(i);
    }
    Shape out = shape;
    out[a] = static_cast<int64_t>(keep.size());
    int64_t outer = dims_product(shape, 0, a), inner = dims_product(shape, a + 1, shape.size());
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data_as<T>();
      T* o = y.data_as<T>();
      for (int64_t p = 0; p < outer; ++p)
        for (int64_t k : keep) {
          std::copy_n(s + (p * dim + k) * inner, inner, o);
          o += inner;
        }
    });
  }

 private:
  bool has_axis_;
  int64_t axis_;
};

/// Unique: distinct elements (or slices along `axis`), sorted or in first-seen order, with
/// first-occurrence indices, inverse indices and counts.
class UniqueKernel final : public Kernel {
 public:
  explicit UniqueKernel(const KernelInfo& info)
      : sorted_(info.node.attr_int("sorted", 1) != 0),
        has_axis_(info.node.has_attr("axis")),
        axis_(info.node.attr_int("axis", 0)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Shape shape = has_axis_ ? x.shape() : Shape{x.numel()};
    auto a = static_cast<size_t>(has_axis_ ? normalize_axis(axis_, x.rank(), ctx.label()) : 0);
    int64_t dim = shape[a], outer = dims_product(shape, 0, a);
    int64_t inner = dims_product(shape, a + 1, shape.size());
    dispatch<AllTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* s = x.data<T>();
      // Slice i is the elements s[(p * dim + i) * inner + q] for all p, q.
      auto less = [&](int64_t i, int64_t j) {
        for (int64_t p = 0; p < outer; ++p)
          for (int64_t q = 0; q < inner; ++q) {
            auto u = static_cast<acc_t<T>>(s[(p * dim + i) * inner + q]);
            auto v = static_cast<acc_t<T>>(s[(p * dim + j) * inner + q]);
            if (u < v) return true;
            if (v < u) return false;
          }
        return false;
      };
      std::vector<int64_t> order(static_cast<size_t>(dim));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), less);
      // Groups of equal slices; stable sort keeps each group's first occurrence first.
      std::vector<int64_t> first, counts, inverse(static_cast<size_t>(dim));
      for (size_t k = 0; k < order.size(); ++k) {
        if (k == 0 || less(order[k - 1], order[k])) {
          first.push_back(order[k]);
          counts.push_back(0);
        }
        ++counts.back();
        inverse[static_cast<size_t>(order[k])] = static_cast<int64_t>(first.size()) - 1;
      }
      std::vector<size_t> rank(first.size());
      std::iota(rank.begin(), rank.end(), 0);
      if (!sorted_)
        std::sort(rank.begin(), rank.end(),
                  [&](size_t i, size_t j) { return first[i] < first[j]; });
      std::vector<int64_t> pos(first.size());
      for (size_t k = 0; k < rank.size(); ++k) pos[rank[k]] = static_cast<int64_t>(k);
      auto u = static_cast<int64_t>(first.size());
      Shape yshape = shape;
      yshape[a] = u;
      T* y = ctx.allocate_output(0, x.dtype(), yshape).template data<T>();
      for (int64_t p = 0; p < outer; ++p)
        for (int64_t k = 0; k < u; ++k)
          std::copy_n(s + (p * dim + first[rank[static_cast<size_t>(k)]]) * inner, inner,
                      y + (p * u + k) * inner);
      auto put = [&](int i, int64_t n, auto value) {
        if (ctx.num_outputs() <= i || !ctx.output_wanted(i)) return;
        int64_t* o = ctx.allocate_output(i, DataType::Int64, {n}).template data<int64_t>();
        for (int64_t k = 0; k < n; ++k) o[k] = value(static_cast<size_t>(k));
      };
      put(1, u, [&](size_t k) { return first[rank[k]]; });
      put(2, dim, [&](size_t k) { return pos[static_cast<size_t>(inverse[k])]; });
      put(3, u, [&](size_t k) { return counts[rank[k]]; });
    });
  }

 private:
  bool sorted_, has_axis_;
  int64_t axis_;
};

}  // namespace

void register_gather_kernels(KernelRegistry& r) {
  auto types = movable_types();
  r.add({"Gather", "", 1, INT_MAX, "cpu", 0, types, make_factory<GatherKernel>()});
  r.add({"GatherElements", "", 11, INT_MAX, "cpu", 0, types, make_factory<GatherElementsKernel>()});
  r.add({"GatherND", "", 11, INT_MAX, "cpu", 0, types, make_factory<GatherNDKernel>()});
  r.add(
      {"ScatterElements", "", 11, INT_MAX, "cpu", 0, types, make_factory<ScatterElementsKernel>()});
  r.add({"Scatter", "", 9, 10, "cpu", 0, types, make_factory<ScatterElementsKernel>()});
  r.add({"ScatterND", "", 11, INT_MAX, "cpu", 0, types, make_factory<ScatterNDKernel>()});
  r.add({"TensorScatter", "", 24, INT_MAX, "cpu", 0, stored_types(),
         make_factory<TensorScatterKernel>()});
  r.add({"OneHot", "", 9, INT_MAX, "cpu", 0, numeric_types(), make_factory<OneHotKernel>()});
  r.add({"NonZero", "", 9, INT_MAX, "cpu", 0, all_types(), function_factory(nonzero_compute)});
  r.add({"Compress", "", 9, INT_MAX, "cpu", 0, types, make_factory<CompressKernel>()});
  r.add({"Unique", "", 11, INT_MAX, "cpu", 0, all_types(), make_factory<UniqueKernel>()});
}

}  // namespace onyx::cpu
