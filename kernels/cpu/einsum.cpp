// Einsum: equations with ellipsis, implicit output, repeated labels (diagonals) and summed
// labels. Operands are contracted left to right; each pairwise contraction is laid out as a
// batched GEMM [batch, m, k] x [batch, k, n] (oneDNN sgemm for float32).

#include <algorithm>
#include <array>
#include <climits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/reduce_plan.h"
#include "kernels/cpu/small_gemm.h"
#include "kernels/cpu/wrap_int.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

/// Labels are the letters' ASCII codes; ellipsis dimensions get kEllipsis + i.
constexpr int kEllipsis = 128;
constexpr int kNumLabels = 256;
/// Marks "..." inside a parsed term.
constexpr int kEllipsisMark = -1;

struct Equation {
  std::vector<std::vector<int>> inputs;  // letters and kEllipsisMark
  std::vector<int> output;               // when explicit
  bool explicit_output = false;
};

Equation parse_equation(const std::string& text, const std::string& who) {
  std::string eq;
  for (char c : text)
    if (c != ' ') eq += c;
  Equation e;
  const size_t arrow = eq.find("->");
  e.explicit_output = arrow != std::string::npos;
  const std::string lhs = eq.substr(0, arrow);
  auto parse_term = [&](const std::string& term) {
    std::vector<int> labels;
    for (size_t i = 0; i < term.size(); ++i) {
      const char c = term[i];
      if (c == '.') {
        ONYX_CHECK(term.compare(i, 3, "...") == 0 &&
                       std::count(labels.begin(), labels.end(), kEllipsisMark) == 0,
                   "[{}] equation '{}' has a malformed ellipsis in term '{}'", who, text, term);
        labels.push_back(kEllipsisMark);
        i += 2;
      } else {
        ONYX_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'),
                   "[{}] equation '{}' has character '{}'; labels must be letters", who, text, c);
        labels.push_back(c);
      }
    }
    return labels;
  };
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(parse_term(lhs.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.explicit_output) {
    e.output = parse_term(eq.substr(arrow + 2));
    for (size_t i = 0; i < e.output.size(); ++i) {
      const int l = e.output[i];
      ONYX_CHECK(std::count(e.output.begin(), e.output.end(), l) == 1,
                 "[{}] equation '{}' repeats '{}' in its output", who, text,
                 l == kEllipsisMark ? std::string("...") : std::string(1, char(l)));
      bool found = l == kEllipsisMark;
      for (const auto& in : e.inputs) found = found || std::count(in.begin(), in.end(), l) > 0;
      ONYX_CHECK(found, "[{}] equation '{}' has output label '{}' that no input has", who, text,
                 char(l));
    }
  }
  return e;
}

/// A strided view of an operand (or an owned intermediate), one entry per distinct label.
template <typename A>
struct Operand {
  std::vector<A> own;
  const A* data = nullptr;
  std::vector<int> labels;
  std::vector<int64_t> sizes, strides;
};

template <typename A>
Operand<A> contiguous_operand(std::vector<A> buf, std::vector<int> labels,
                              const std::array<int64_t, kNumLabels>& size) {
  Operand<A> op;
  op.own = std::move(buf);
  op.data = op.own.data();
  op.labels = std::move(labels);
  op.strides.resize(op.labels.size());
  int64_t st = 1;
  for (size_t i = op.labels.size(); i-- > 0;) {
    op.sizes.insert(op.sizes.begin(), size[op.labels[i]]);
    op.strides[i] = st;
    st *= size[op.labels[i]];
  }
  return op;
}

/// True when `v` already holds exactly `labels` in row-major order (no copy needed).
template <typename A>
bool is_laid_out_as(const Operand<A>& v, const std::vector<int>& labels,
                    const std::array<int64_t, kNumLabels>& size) {
  if (v.labels != labels) return false;
  int64_t st = 1;
  for (size_t i = labels.size(); i-- > 0;) {
    if (v.sizes[i] != size[labels[i]]) return false;
    if (v.sizes[i] != 1 && v.strides[i] != st) return false;
    st *= v.sizes[i];
  }
  return true;
}

/// out[labels] = sum of v over its labels not in `labels`; size-1 dims of v broadcast.
template <typename A>
std::vector<A> gather_sum(const Operand<A>& v, const std::vector<int>& labels,
                          const std::array<int64_t, kNumLabels>& size, int threads) {
  std::vector<int64_t> osz, ost, ssz, sst;
  int64_t total = 1;
  for (int l : labels) {
    const auto it = std::find(v.labels.begin(), v.labels.end(), l);
    const size_t k = it - v.labels.begin();
    osz.push_back(size[l]);
    ost.push_back(it == v.labels.end() || v.sizes[k] == 1 ? 0 : v.strides[k]);
    total *= size[l];
  }
  bool empty_sum = false;
  for (size_t k = 0; k < v.labels.size(); ++k) {
    if (std::find(labels.begin(), labels.end(), v.labels[k]) != labels.end()) continue;
    if (v.sizes[k] == 0) empty_sum = true;
    if (v.sizes[k] <= 1) continue;
    ssz.push_back(v.sizes[k]);
    sst.push_back(v.strides[k]);
  }
  std::vector<A> out(total, A(0));
  if (total == 0 || empty_sum) return out;
  const int no = static_cast<int>(osz.size()), ns = static_cast<int>(ssz.size());
  const int64_t nlast = ns ? ssz[ns - 1] : 1, slast = ns ? sst[ns - 1] : 0;
  int64_t sum_count = 1;
  for (int64_t s : ssz) sum_count *= s;
  parallel_for(total, threads, std::max<int64_t>(1, kReduceGrain / sum_count),
               [&](int64_t b, int64_t e) {
                 std::vector<int64_t> idx(no), sidx(ns);
                 int64_t off = 0;
                 int64_t rem = b;
                 for (int d = no - 1; d >= 0; --d) {
                   idx[d] = rem % osz[d];
                   rem /= osz[d];
                   off += idx[d] * ost[d];
                 }
                 for (int64_t o = b; o < e; ++o) {
                   A acc = A(0);
                   int64_t soff = 0;
                   while (true) {
                     const A* p = v.data + off + soff;
                     for (int64_t k = 0; k < nlast; ++k) acc += p[k * slast];
                     int d = ns - 2;
                     for (; d >= 0; --d) {
                       soff += sst[d];
                       if (++sidx[d] < ssz[d]) break;
                       soff -= sst[d] * ssz[d];
                       sidx[d] = 0;
                     }
                     if (d < 0) break;
                   }
                   out[o] = acc;
                   for (int d = no - 1; d >= 0; --d) {
                     off += ost[d];
                     if (++idx[d] < osz[d]) break;
                     off -= ost[d] * osz[d];
                     idx[d] = 0;
                   }
                 }
               });
  return out;
}

/// c[bt] = a[bt] (m x k) * b[bt] (k x n), all row-major and contiguous.
template <typename A>
void batched_gemm(const A* a, const A* b, A* c, int64_t batch, int64_t m, int64_t k, int64_t n,
                  int threads, const std::string& who) {
  if (batch * m * n == 0) return;
  if (k == 0) {
    std::fill(c, c + batch * m * n, A(0));
    return;
  }
  if constexpr (std::is_same_v<A, float>) {
    if (m * n * k >= 32 * 32 * 32) {
      auto one = [&](int64_t bt) {
        sgemm(who.c_str(), false, false, m, n, k, a + bt * m * k, k, b + bt * k * n, n, 0.0f,
              c + bt * m * n, n);
      };
      // Many batches: one sgemm per thread; few: let each sgemm use the threads.
      if (batch >= threads) {
        parallel_for(batch, threads, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t bt = b0; bt < b1; ++bt) one(bt);
        });
      } else {
        for (int64_t bt = 0; bt < batch; ++bt) one(bt);
      }
      return;
    }
  }
  parallel_for(batch * m, threads, std::max<int64_t>(1, kReduceGrain / (k * n)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const A* arow = a + r * k;
                   const A* bm = b + (r / m) * k * n;
                   A* crow = c + r * n;
                   std::fill(crow, crow + n, A(0));
                   for (int64_t kk = 0; kk < k; ++kk) {
                     const A s = arow[kk];
                     const A* brow = bm + kk * n;
                     for (int64_t j = 0; j < n; ++j) crow[j] += static_cast<A>(s * brow[j]);
                   }
                 }
               });
}

class EinsumKernel final : public Kernel {
 public:
  explicit EinsumKernel(const KernelInfo& info)
      : equation_text_(info.node.require_attr("equation", Attribute::Type::String).s),
        eq_(parse_equation(equation_text_, info.label())) {}

  void compute(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    ONYX_CHECK(n == static_cast<int>(eq_.inputs.size()),
               "[{}] equation '{}' has {} operands but the node has {} inputs", ctx.label(),
               equation_text_, eq_.inputs.size(), n);
    std::vector<const Tensor*> xs;
    for (int i = 0; i < n; ++i) {
      xs.push_back(&ctx.required_input(i));
      ONYX_CHECK(xs[i]->dtype() == xs[0]->dtype(),
                 "[{}] all inputs should have one dtype; input 0 is {} but input {} is {}",
                 ctx.label(), dtype_name(xs[0]->dtype()), i, dtype_name(xs[i]->dtype()));
    }
    dispatch<NumericTypes>(xs[0]->dtype(), ctx.label(), [&]<typename T>() { run<T>(ctx, xs); });
  }

 private:
  template <typename T>
  void run(KernelContext& ctx, const std::vector<const Tensor*>& xs) const {
    using A = typename wrapping_acc<acc_t<T>>::type;  // signed integers wrap around, as in MatMul
    const std::string who = ctx.label();
    const int n = static_cast<int>(xs.size());
    // Expand "..." into right-aligned ellipsis labels.
    int max_ell = 0;
    std::vector<int> ell(n, 0);
    for (int i = 0; i < n; ++i) {
      const auto& term = eq_.inputs[i];
      const int letters = static_cast<int>(term.size()) -
                          static_cast<int>(std::count(term.begin(), term.end(), kEllipsisMark));
      const bool has_ell = letters != static_cast<int>(term.size());
      ell[i] = static_cast<int>(xs[i]->rank()) - letters;
      ONYX_CHECK(has_ell ? ell[i] >= 0 : ell[i] == 0,
                 "[{}] equation '{}' gives input {} {} labels but it has rank {} (shape {})", who,
                 equation_text_, i, letters, xs[i]->rank(), shape_str(xs[i]->shape()));
      max_ell = std::max(max_ell, ell[i]);
    }
    std::array<int64_t, kNumLabels> size;
    size.fill(-1);
    std::array<int, kNumLabels> count{};  // occurrences of each letter in the equation
    for (const auto& term : eq_.inputs)
      for (int l : term)
        if (l != kEllipsisMark) ++count[l];
    std::vector<Operand<A>> ops(n);
    for (int i = 0; i < n; ++i) {
      std::vector<int> labels;
      for (int l : eq_.inputs[i]) {
        if (l != kEllipsisMark) labels.push_back(l);
        else
          for (int t = 0; t < ell[i]; ++t) labels.push_back(kEllipsis + max_ell - ell[i] + t);
      }
      const Shape& shape = xs[i]->shape();
      Operand<A>& op = ops[i];
      if constexpr (std::is_same_v<A, T>) {
        op.data = xs[i]->data<T>();
      } else {
        op.own.resize(xs[i]->numel());
        const T* src = xs[i]->data<T>();
        for (int64_t k = 0; k < xs[i]->numel(); ++k) op.own[k] = static_cast<A>(src[k]);
        op.data = op.own.data();
      }
      int64_t stride = 1;
      std::vector<int64_t> strides(shape.size());
      for (size_t d = shape.size(); d-- > 0;) strides[d] = stride, stride *= shape[d];
      for (size_t d = 0; d < labels.size(); ++d) {
        const int l = labels[d];
        const int64_t s = shape[d];
        auto it = std::find(op.labels.begin(), op.labels.end(), l);
        if (it != op.labels.end()) {  // repeated label: walk the diagonal
          const size_t k = it - op.labels.begin();
          ONYX_CHECK(op.sizes[k] == s, "[{}] label '{}' of input {} has sizes {} and {}", who,
                     char(l), i, op.sizes[k], s);
          op.strides[k] += strides[d];
          continue;
        }
        op.labels.push_back(l);
        op.sizes.push_back(s);
        op.strides.push_back(strides[d]);
        if (size[l] < 0 || size[l] == s) {
          size[l] = s;
        } else if (l >= kEllipsis && (size[l] == 1 || s == 1)) {
          size[l] = size[l] == 1 ? s : size[l];
        } else {
          ONYX_THROW("[{}] label '{}' has size {} in an earlier input but {} in input {} (shape {})",
                     who, l >= kEllipsis ? std::string("...") : std::string(1, char(l)), size[l],
                     s, i, shape_str(shape));
        }
      }
    }
    // Output labels: explicit, or the ellipsis then the letters used once, in ASCII order.
    std::vector<int> out_labels;
    if (eq_.explicit_output) {
      for (int l : eq_.output) {
        if (l != kEllipsisMark) out_labels.push_back(l);
        else
          for (int t = 0; t < max_ell; ++t) out_labels.push_back(kEllipsis + t);
      }
    } else {
      for (int t = 0; t < max_ell; ++t) out_labels.push_back(kEllipsis + t);
      for (int l = 0; l < kEllipsis; ++l)
        if (count[l] == 1) out_labels.push_back(l);
    }
    Shape out_shape;
    for (int l : out_labels) out_shape.push_back(size[l]);
    Tensor& y = ctx.allocate_output(0, dtype_of<T>(), out_shape);
    if (y.numel() == 0) return;

    const int threads = ctx.threads();
    Operand<A> cur = std::move(ops[0]);
    for (int i = 1; i < n; ++i) cur = contract(cur, ops[i], needed_after(i, ops, out_labels), size,
                                               threads, who);
    T* dst = y.data<T>();
    if constexpr (std::is_same_v<A, T>) {
      if (is_laid_out_as(cur, out_labels, size)) {
        std::copy(cur.data, cur.data + y.numel(), dst);
        return;
      }
    }
    const std::vector<A> res = gather_sum(cur, out_labels, size, threads);
    for (int64_t k = 0; k < y.numel(); ++k) dst[k] = static_cast<T>(res[k]);
  }

  /// Labels still needed after contracting operand i: the output's and later operands'.
  template <typename A>
  static std::vector<int> needed_after(int i, const std::vector<Operand<A>>& ops,
                                       const std::vector<int>& out_labels) {
    std::vector<int> keep = out_labels;
    for (size_t j = i + 1; j < ops.size(); ++j)
      keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    return keep;
  }

  template <typename A>
  static Operand<A> contract(const Operand<A>& a, const Operand<A>& b, const std::vector<int>& keep,
                             const std::array<int64_t, kNumLabels>& size, int threads,
                             const std::string& who) {
    auto has = [](const std::vector<int>& v, int l) {
      return std::find(v.begin(), v.end(), l) != v.end();
    };
    std::vector<int> batch, am, con, bn;
    for (int l : a.labels) {
      if (has(b.labels, l)) (has(keep, l) ? batch : con).push_back(l);
      else if (has(keep, l)) am.push_back(l);
    }
    for (int l : b.labels)
      if (!has(a.labels, l) && has(keep, l)) bn.push_back(l);
    auto prod = [&](const std::vector<int>& ls) {
      int64_t p = 1;
      for (int l : ls) p *= size[l];
      return p;
    };
    std::vector<int> a_layout = batch, b_layout = batch, c_layout = batch;
    a_layout.insert(a_layout.end(), am.begin(), am.end());
    a_layout.insert(a_layout.end(), con.begin(), con.end());
    b_layout.insert(b_layout.end(), con.begin(), con.end());
    b_layout.insert(b_layout.end(), bn.begin(), bn.end());
    c_layout.insert(c_layout.end(), am.begin(), am.end());
    c_layout.insert(c_layout.end(), bn.begin(), bn.end());
    std::vector<A> abuf, bbuf;
    const A* ap = a.data;
    const A* bp = b.data;
    if (!is_laid_out_as(a, a_layout, size)) abuf = gather_sum(a, a_layout, size, threads), ap = abuf.data();
    if (!is_laid_out_as(b, b_layout, size)) bbuf = gather_sum(b, b_layout, size, threads), bp = bbuf.data();
    const int64_t nb = prod(batch), m = prod(am), k = prod(con), nn = prod(bn);
    std::vector<A> c(nb * m * nn);
    batched_gemm(ap, bp, c.data(), nb, m, k, nn, threads, who);
    return contiguous_operand(std::move(c), std::move(c_layout), size);
  }

  std::string equation_text_;
  Equation eq_;
};

}  // namespace

void register_einsum_kernels(KernelRegistry& r) {
  r.add({"Einsum", "", 12, INT_MAX, "cpu", 0, numeric_types(), make_factory<EinsumKernel>()});
}

}  // namespace onyx::cpu
