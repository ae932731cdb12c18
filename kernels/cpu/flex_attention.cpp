// FlexAttention (ai.onnx.preview): scaled dot-product attention whose scores and
// probabilities pass through optional user subgraphs (score_mod, mask_mod, prob_mod).
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

const Graph* optional_graph(const Node& node, const char* name) {
  const Attribute* a = node.attr(name);
  if (!a) return nullptr;
  ONYX_CHECK(a->type == Attribute::Type::Graph && a->g,
             "[{}] attribute {} should be a graph but is {}", node.label(), name,
             attr_type_name(a->type));
  ONYX_CHECK(a->g->inputs.size() == 1 && a->g->outputs.size() == 1,
             "[{}] {} should map one tensor to one tensor but has {} inputs and {} outputs",
             node.label(), name, a->g->inputs.size(), a->g->outputs.size());
  return a->g.get();
}

class FlexAttentionKernel final : public Kernel {
 public:
  explicit FlexAttentionKernel(const KernelInfo& info)
      : score_mod_(optional_graph(info.node, "score_mod")),
        mask_mod_(optional_graph(info.node, "mask_mod")),
        prob_mod_(optional_graph(info.node, "prob_mod")),
        scale_(info.node.has_attr("scale") ? info.node.attr_float("scale", 0.0f) : 0.0f),
        has_scale_(info.node.has_attr("scale")) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& q = ctx.required_input(0);
    const Tensor& k = ctx.required_input(1);
    const Tensor& v = ctx.required_input(2);
    for (const Tensor* t : {&q, &k, &v})
      ONYX_CHECK(t->rank() == 4, "[{}] Q, K and V should be rank 4 but one has shape {}",
                 ctx.label(), shape_str(t->shape()));
    ONYX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
               "[{}] Q, K and V should share a dtype but are {}, {} and {}", ctx.label(),
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
    int64_t B = q.shape()[0], Hq = q.shape()[1], L = q.shape()[2], E = q.shape()[3];
    int64_t Hkv = k.shape()[1], S = k.shape()[2], Ev = v.shape()[3];
    ONYX_CHECK(k.shape()[0] == B && k.shape()[3] == E && v.shape()[0] == B && v.shape()[1] == Hkv &&
                   v.shape()[2] == S && Hkv > 0 && Hq % Hkv == 0,
               "[{}] K {} and V {} do not fit Q {} (K [B, H_kv, S, E], V [B, H_kv, S, Ev], "
               "H_q a multiple of H_kv)",
               ctx.label(), shape_str(k.shape()), shape_str(v.shape()), shape_str(q.shape()));
    dispatch<FloatTypes>(q.dtype(), ctx.label(), [&]<typename T>() {
      using A = acc_t<T>;
      A scale = has_scale_ ? A(scale_) : A(1) / std::sqrt(A(E));
      int64_t group = Hq / Hkv;
      Tensor scores = Tensor::empty(dtype_of<A>(), {B, Hq, L, S});
      const T* qs = q.data<T>();
      const T* ks = k.data<T>();
      A* sc = scores.data<A>();
      parallel_for(B * Hq, ctx.threads(), 1, [&](int64_t b0, int64_t e0) {
        for (int64_t bh = b0; bh < e0; ++bh) {
          int64_t kv = (bh / Hq) * Hkv + (bh % Hq) / group;
          for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j < S; ++j) {
              A acc = 0;
              for (int64_t d = 0; d < E; ++d)
                acc += A(qs[(bh * L + i) * E + d]) * A(ks[(kv * S + j) * E + d]);
              sc[(bh * L + i) * S + j] = acc * scale;
            }
        }
      });
      scores = apply_mod(ctx, score_mod_, std::move(scores), "score_mod");
      scores = apply_mod(ctx, mask_mod_, std::move(scores), "mask_mod");
      softmax_rows<A>(scores.data<A>(), B * Hq * L, S);
      Tensor probs = apply_mod(ctx, prob_mod_, std::move(scores), "prob_mod");
      const A* p = probs.data<A>();
      const T* vs = v.data<T>();
      Tensor& y = ctx.allocate_output(0, q.dtype(), {B, Hq, L, Ev});
      T* ys = y.data<T>();
      parallel_for(B * Hq, ctx.threads(), 1, [&](int64_t b0, int64_t e0) {
        std::vector<A> row(static_cast<size_t>(Ev));
        for (int64_t bh = b0; bh < e0; ++bh) {
          int64_t kv = (bh / Hq) * Hkv + (bh % Hq) / group;
          for (int64_t i = 0; i < L; ++i) {
            std::fill(row.begin(), row.end(), A(0));
            for (int64_t j = 0; j < S; ++j) {
              A pij = p[(bh * L + i) * S + j];
              const T* vr = vs + (kv * S + j) * Ev;
              for (int64_t d = 0; d < Ev; ++d) row[d] += pij * A(vr[d]);
            }
            for (int64_t d = 0; d < Ev; ++d) ys[(bh * L + i) * Ev + d] = T(row[d]);
          }
        }
      });
    });
  }

 private:
  /// Runs a modifier subgraph over the whole [B, H, L, S] tensor; it must keep shape and dtype.
  static Tensor apply_mod(KernelContext& ctx, const Graph* g, Tensor t, const char* what) {
    if (!g) return t;
    std::vector<Datum> outs = ctx.run_subgraph(*g, {Datum(t)});
    ONYX_CHECK(outs.size() == 1 && outs[0].is_tensor() && outs[0].tensor.dtype() == t.dtype() &&
                   outs[0].tensor.shape() == t.shape(),
               "[{}] {} should return {}{} but returned {}", ctx.label(), what,
               dtype_name(t.dtype()), shape_str(t.shape()),
               outs.size() == 1 && outs[0].is_tensor()
                   ? dtype_name(outs[0].tensor.dtype()) + shape_str(outs[0].tensor.shape())
                   : std::string("no tensor"));
    // The subgraph's result may alias its input or a constant: copy before writing in place.
    return outs[0].tensor.clone();
  }

  template <typename A>
  static void softmax_rows(A* x, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) {
      A* row = x + r * n;
      A mx = -std::numeric_limits<A>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      A sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += row[j] = std::exp(row[j] - mx);
      for (int64_t j = 0; j < n; ++j) row[j] /= sum;
    }
  }

  const Graph* score_mod_;
  const Graph* mask_mod_;
  const Graph* prob_mod_;
  float scale_;
  bool has_scale_;
};

}  // namespace

void register_flex_attention_kernels(KernelRegistry& r) {
  r.add({"FlexAttention", "ai.onnx.preview", 1, INT_MAX, "cpu", 0, float_types(),
         make_factory<FlexAttentionKernel>()});
}

}  // namespace onyx::cpu
