// ai.onyx ScatterAddSum: a sum of gradient terms, some dense, some rows scattered into zeros.
// Autodiff writes the gradient of Gather / GatherND as ScatterND(zeros(x), indices, dy,
// reduction=add) and sums a value's gradients with Sum, so a tied embedding (GPT-2's token
// table, read by Gather and by the LM head) gets Sum(dW_head, ScatterND(zeros, ids, dy)), and
// torch's packed q/k/v, three Gathers of one [3, ...] tensor, a Sum of three ScatterNDs. Each
// ScatterND copies a whole tensor of zeros (a 32 MB constant for a 16384 x 512 table) on one
// thread and the Sum reads it back; the optimizer's fuse_scatter_add_sum
// (inference/fusions_scatter_sum.cpp) swaps them for this kernel, which touches only the rows
// the indices name, and drops the zero constants.
//
//   attribute terms: one entry per term of the sum, in order: 0 a dense tensor of the output's
//             shape (one input), 1 a ScatterND with reduction add into zeros (two inputs: the
//             updates, then int64 indices whose last dim holds the tuples)
//   inputs:   each term's inputs (so input 0 holds the dtype), then shape (int64 1-D, the
//             output's)
//   output:   the left fold of the terms, the bits of Sum over the ScatterNDs: a scattered
//             row accumulates its updates in index order from 0 before the fold adds it.
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "graph/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/index_checks.h"
#include "kernels/parallel.h"
#include "kernels/shape_util.h"

namespace onyx::cpu {
namespace {

struct Term {
  const Tensor* dense = nullptr;
  const Tensor* indices = nullptr;
  const Tensor* updates = nullptr;
};

/// One scattered term's updates grouped by the slice they hit: slice offsets in increasing
/// order, and for each the update numbers in index order.
struct Groups {
  std::vector<int64_t> offset;
  std::vector<int64_t> start;  // group g's updates are order[start[g] .. start[g + 1])
  std::vector<int64_t> order;
};

/// The updates sorted by slice (`slices` of `slice` elements each), stably: a slice keeps its
/// updates in index order, as ScatterND adds them. A counting sort, O(updates + slices), when the
/// slices are not many more than the updates (an embedding table's rows); else a comparison sort
/// of the updates alone (a few elements scattered into a large tensor).
Groups group_by_slice(const std::vector<int64_t>& offs, int64_t slice, int64_t slices) {
  const auto n = static_cast<int64_t>(offs.size());
  Groups gr;
  gr.order.resize(offs.size());
  if (slices > 4 * n + 4096) {
    std::iota(gr.order.begin(), gr.order.end(), int64_t{0});
    std::stable_sort(gr.order.begin(), gr.order.end(), [&](int64_t a, int64_t b) {
      return offs[static_cast<size_t>(a)] < offs[static_cast<size_t>(b)];
    });
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = offs[static_cast<size_t>(gr.order[static_cast<size_t>(i)])];
      if (gr.offset.empty() || gr.offset.back() != off) {
        gr.offset.push_back(off);
        gr.start.push_back(i);
      }
    }
    gr.start.push_back(n);
    return gr;
  }
  // first[s]: where slice s's updates start in `order` (counts, then their prefix sums).
  std::vector<int64_t> first(static_cast<size_t>(slices) + 1, 0);
  for (int64_t off : offs) ++first[static_cast<size_t>(off / slice) + 1];
  for (size_t s = 1; s < first.size(); ++s) first[s] += first[s - 1];
  for (int64_t s = 0; s < slices; ++s)
    if (first[static_cast<size_t>(s) + 1] > first[static_cast<size_t>(s)]) {
      gr.offset.push_back(s * slice);
      gr.start.push_back(first[static_cast<size_t>(s)]);
    }
  gr.start.push_back(n);
  for (int64_t i = 0; i < n; ++i)
    gr.order[static_cast<size_t>(first[static_cast<size_t>(offs[static_cast<size_t>(i)] / slice)]++)] = i;
  return gr;
}

class ScatterAddSumKernel final : public Kernel {
 public:
  explicit ScatterAddSumKernel(const KernelInfo& info) : kinds_(info.node.attr_ints("terms")) {
    ONYX_CHECK(!kinds_.empty(), "[{}] terms must name at least one term", info.label());
    int64_t inputs = 1;
    for (int64_t k : kinds_) {
      ONYX_CHECK(k == 0 || k == 1, "[{}] terms holds 0 (dense) or 1 (scattered), found {}",
                 info.label(), k);
      inputs += k == 0 ? 1 : 2;
    }
    ONYX_CHECK(static_cast<int64_t>(info.node.num_inputs()) == inputs,
               "[{}] terms {} ask for {} inputs (shape last), the node has {}", info.label(),
               fmt::join(kinds_, ", "), inputs, info.node.num_inputs());
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& shape_t = ctx.required_input(ctx.num_inputs() - 1);
    ONYX_CHECK(shape_t.dtype() == DataType::Int64 && shape_t.rank() == 1,
               "[{}] shape must be a 1-D int64 tensor, got {} {}", ctx.label(),
               dtype_name(shape_t.dtype()), shape_str(shape_t.shape()));
    const Shape shape = shape_t.to_int64_vector();
    for (int64_t d : shape)
      ONYX_CHECK(d >= 0, "[{}] shape {} has a negative dim", ctx.label(), shape_str(shape));
    std::vector<Term> terms;
    int in = 0;
    for (int64_t k : kinds_) {
      Term t;
      if (k == 0) {
        t.dense = &ctx.required_input(in++);
      } else {
        t.updates = &ctx.required_input(in++);
        t.indices = &ctx.required_input(in++);
      }
      terms.push_back(t);
    }
    const DataType dt = terms[0].dense ? terms[0].dense->dtype() : terms[0].updates->dtype();
    ONYX_CHECK(dt == DataType::Float || dt == DataType::Double,
               "[{}] terms must be float or double, got {}", ctx.label(), dtype_name(dt));
    // Every check before the output is taken.
    std::vector<std::vector<int64_t>> offsets(terms.size());
    for (size_t i = 0; i < terms.size(); ++i) {
      const Term& t = terms[i];
      if (t.dense) {
        ONYX_CHECK(t.dense->dtype() == dt && t.dense->shape() == shape,
                   "[{}] term {} should be {}{} but is {}{}", ctx.label(), i, dtype_name(dt),
                   shape_str(shape), dtype_name(t.dense->dtype()), shape_str(t.dense->shape()));
        continue;
      }
      offsets[i] = nd_offsets(ctx, *t.indices, shape, 0);
      const auto k = static_cast<size_t>(t.indices->dim(-1));
      check_nd_updates(ctx, shape, dt, *t.indices, k, *t.updates);
    }
    Tensor& y = ctx.allocate_output(0, dt, shape);
    const int threads = ctx.threads();
    dispatch<TypeList<float, double>>(dt, ctx.label(), [&]<typename T>() {
      T* out = y.data<T>();
      const int64_t n = y.numel();
      for (size_t i = 0; i < terms.size(); ++i) {
        const Term& t = terms[i];
        if (t.dense) {
          const T* d = t.dense->data<T>();
          parallel_for(n, threads, kCheapGrain, [&](int64_t b, int64_t e) {
            if (i == 0)  // + 0: the scattered terms' zeros turn a -0 into +0 in Sum too
              for (int64_t j = b; j < e; ++j) out[j] = d[j] + T(0);
            else
              for (int64_t j = b; j < e; ++j) out[j] = out[j] + d[j];
          });
          continue;
        }
        if (i == 0)
          parallel_for(n, threads, kCheapGrain,
                       [&](int64_t b, int64_t e) { std::fill(out + b, out + e, T(0)); });
        const auto k = static_cast<size_t>(t.indices->dim(-1));
        const int64_t slice = dims_product(shape, k, shape.size());
        if (slice == 0) continue;
        const Groups gr = group_by_slice(offsets[i], slice, n / slice);
        const T* u = t.updates->data<T>();
        const auto groups = static_cast<int64_t>(gr.offset.size());
        parallel_for(groups, threads, std::max<int64_t>(1, kCheapGrain / slice),
                     [&](int64_t b, int64_t e) {
                       std::vector<T> acc;
                       for (int64_t g = b; g < e; ++g) {
                         T* row = out + gr.offset[static_cast<size_t>(g)];
                         const int64_t first = gr.start[static_cast<size_t>(g)],
                                       last = gr.start[static_cast<size_t>(g) + 1];
                         const T* u0 = u + gr.order[static_cast<size_t>(first)] * slice;
                         if (last - first == 1) {  // the scattered zeros add exactly u0
                           for (int64_t j = 0; j < slice; ++j) row[j] = row[j] + (T(0) + u0[j]);
                           continue;
                         }
                         // Repeated indices: ScatterND's running sum from 0, then the fold's add.
                         acc.assign(static_cast<size_t>(slice), T(0));
                         for (int64_t q = first; q < last; ++q) {
                           const T* uq = u + gr.order[static_cast<size_t>(q)] * slice;
                           for (int64_t j = 0; j < slice; ++j) acc[static_cast<size_t>(j)] += uq[j];
                         }
                         for (int64_t j = 0; j < slice; ++j) row[j] = row[j] + acc[static_cast<size_t>(j)];
                       }
                     });
      }
    });
  }

 private:
  std::vector<int64_t> kinds_;
};

}  // namespace

void register_scatter_add_sum_kernels(KernelRegistry& r) {
  r.add({.op_type = "ScatterAddSum",
         .domain = "ai.onyx",
         .since = 1,
         .types = {DataType::Float, DataType::Double},
         .create = [](const KernelInfo& i) -> std::unique_ptr<Kernel> {
           return std::make_unique<ScatterAddSumKernel>(i);
         }});
}

}  // namespace onyx::cpu
