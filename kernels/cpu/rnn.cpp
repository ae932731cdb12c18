// RNN, GRU and LSTM: forward, reverse or bidirectional over [S, B, I] (layout 0) or [B, S, I]
// (layout 1) inputs, with per-batch sequence_lens (steps past a batch's length give zeros in Y
// and leave its state unchanged), initial states, clip, configurable activations, GRU's
// linear_before_reset and LSTM's peepholes and input_forget. The input projection of all
// steps is one GEMM; each step adds one GEMM with the recurrent weights.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/small_gemm.h"
#include "graph/dispatch.h"

namespace onyx::cpu {
namespace {

enum class Cell { RNN, GRU, LSTM };

/// One activation function of the ONNX RNN family with its alpha and beta.
struct Activation {
  enum Kind {
    Relu,
    Tanh,
    Sigmoid,
    Affine,
    LeakyRelu,
    ThresholdedRelu,
    ScaledTanh,
    HardSigmoid,
    Elu,
    Softsign,
    Softplus
  };
  Kind kind = Tanh;
  float alpha = 0.f, beta = 0.f;

  template <typename A>
  A operator()(A x) const {
    switch (kind) {
      case Relu:
        return x > A(0) ? x : A(0);
      case Tanh:
        return std::tanh(x);
      case Sigmoid:
        return A(1) / (A(1) + std::exp(-x));
      case Affine:
        return A(alpha) * x + A(beta);
      case LeakyRelu:
        return x >= A(0) ? x : A(alpha) * x;
      case ThresholdedRelu:
        return x > A(alpha) ? x : A(0);
      case ScaledTanh:
        return A(alpha) * std::tanh(A(beta) * x);
      case HardSigmoid:
        return std::clamp(A(alpha) * x + A(beta), A(0), A(1));
      case Elu:
        return x >= A(0) ? x : A(alpha) * (std::exp(x) - A(1));
      case Softsign:
        return x / (A(1) + std::abs(x));
      case Softplus:
        return std::log1p(std::exp(x));
    }
    return x;
  }
};

/// Parses `activations` with alpha/beta taken in order by the functions that use them.
std::vector<Activation> parse_activations(const Node& node, Cell cell, int64_t dirs) {
  static const std::vector<std::string> rnn_def{"Tanh"}, gru_def{"Sigmoid", "Tanh"},
      lstm_def{"Sigmoid", "Tanh", "Tanh"};
  const auto& def = cell == Cell::RNN ? rnn_def : cell == Cell::GRU ? gru_def : lstm_def;
  const size_t per = def.size();
  std::vector<std::string> names = node.attr_strings("activations", {});
  if (names.empty())
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), def.begin(), def.end());
  if (names.size() == per && dirs == 2) names.insert(names.end(), names.begin(), names.end());
  ONYX_CHECK(names.size() == per * dirs, "[{}] activations should list {} functions but lists {}",
             node.label(), per * dirs, names.size());
  const std::vector<float> alphas = node.attr_floats("activation_alpha", {});
  const std::vector<float> betas = node.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  struct Spec {
    const char* name;
    Activation::Kind kind;
    bool alpha, beta;
    float da, db;
  };
  static const Spec specs[] = {
      {"relu", Activation::Relu, false, false, 0, 0},
      {"tanh", Activation::Tanh, false, false, 0, 0},
      {"sigmoid", Activation::Sigmoid, false, false, 0, 0},
      {"affine", Activation::Affine, true, true, 1.f, 0.f},
      {"leakyrelu", Activation::LeakyRelu, true, false, 0.01f, 0},
      {"thresholdedrelu", Activation::ThresholdedRelu, true, false, 1.f, 0},
      {"scaledtanh", Activation::ScaledTanh, true, true, 1.f, 1.f},
      {"hardsigmoid", Activation::HardSigmoid, true, true, 0.2f, 0.5f},
      {"elu", Activation::Elu, true, false, 1.f, 0},
      {"softsign", Activation::Softsign, false, false, 0, 0},
      {"softplus", Activation::Softplus, false, false, 0, 0},
  };
  std::vector<Activation> out;
  for (const std::string& n : names) {
    std::string lower = n;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const Spec* s = nullptr;
    for (const Spec& sp : specs)
      if (lower == sp.name) s = &sp;
    ONYX_CHECK(s, "[{}] unknown activation function '{}'", node.label(), n);
    Activation a{s->kind, s->da, s->db};
    if (s->alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (s->beta && bi < betas.size()) a.beta = betas[bi++];
    out.push_back(a);
  }
  return out;
}

class RecurrentKernel final : public Kernel {
 public:
  RecurrentKernel(const KernelInfo& info, Cell cell)
      : cell_(cell),
        gates_(cell == Cell::RNN   ? 1
               : cell == Cell::GRU ? 3
                                   : 4),
        hidden_attr_(info.node.attr_int("hidden_size", 0)),
        layout_(info.node.attr_int("layout", 0)),
        linear_before_reset_(info.node.attr_int("linear_before_reset", 0) != 0),
        input_forget_(info.node.attr_int("input_forget", 0) != 0),
        has_clip_(info.node.has_attr("clip")),
        clip_(info.node.attr_float("clip", 0.f)) {
    const std::string dir = info.node.attr_string("direction", "forward");
    ONYX_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional",
               "[{}] direction should be forward, reverse or bidirectional but is '{}'",
               info.label(), dir);
    reverse_ = dir == "reverse";
    dirs_ = dir == "bidirectional" ? 2 : 1;
    ONYX_CHECK(layout_ == 0 || layout_ == 1, "[{}] layout should be 0 or 1 but is {}", info.label(),
               layout_);
    acts_ = parse_activations(info.node, cell, dirs_);
  }

  void compute(KernelContext& ctx) const override {
    const std::string who = ctx.label();
    const Tensor& x = ctx.required_input(0);
    const Tensor& w = ctx.required_input(1);
    const Tensor& r = ctx.required_input(2);
    auto opt = [&](int i) { return i < ctx.num_inputs() ? ctx.input(i) : nullptr; };
    const Tensor* bias = opt(3);
    const Tensor* lens = opt(4);
    const Tensor* h0 = opt(5);
    const Tensor* c0 = cell_ == Cell::LSTM ? opt(6) : nullptr;
    const Tensor* peep = cell_ == Cell::LSTM ? opt(7) : nullptr;

    ONYX_CHECK(x.rank() == 3, "[{}] X should be 3-D but is {}", who, shape_str(x.shape()));
    const int64_t S = x.dim(layout_ ? 1 : 0), B = x.dim(layout_ ? 0 : 1), I = x.dim(2);
    ONYX_CHECK(r.rank() == 3, "[{}] R should be 3-D but is {}", who, shape_str(r.shape()));
    const int64_t H = r.dim(2), G = gates_;
    ONYX_CHECK(hidden_attr_ == 0 || hidden_attr_ == H, "[{}] hidden_size is {} but R {} implies {}",
               who, hidden_attr_, shape_str(r.shape()), H);
    auto check = [&](const Tensor* t, const char* name, const Shape& want) {
      if (!t) return;
      ONYX_CHECK(t->dtype() == x.dtype() && t->shape() == want,
                 "[{}] {} should be {} {} but is {} {}", who, name, dtype_name(x.dtype()),
                 shape_str(want), dtype_name(t->dtype()), shape_str(t->shape()));
    };
    check(&w, "W", {dirs_, G * H, I});
    check(&r, "R", {dirs_, G * H, H});
    check(bias, "B", {dirs_, 2 * G * H});
    const Shape state = layout_ ? Shape{B, dirs_, H} : Shape{dirs_, B, H};
    check(h0, "initial_h", state);
    check(c0, "initial_c", state);
    check(peep, "P", {dirs_, 3 * H});
    std::vector<int64_t> len(B, S);
    if (lens) {
      ONYX_CHECK(lens->dtype() == DataType::Int32 && lens->shape() == Shape({B}),
                 "[{}] sequence_lens should be int32 [{}] but is {} {}", who, B,
                 dtype_name(lens->dtype()), shape_str(lens->shape()));
      len = lens->to_int64_vector();
      for (int64_t l : len)
        ONYX_CHECK(l >= 0 && l <= S, "[{}] sequence length {} is outside [0, {}]", who, l, S);
    }

    Tensor* y = ctx.output_wanted(0)
                    ? &ctx.allocate_output(0, x.dtype(),
                                           layout_ ? Shape{B, S, dirs_, H} : Shape{S, dirs_, B, H})
                    : nullptr;
    Tensor* yh = ctx.num_outputs() > 1 && ctx.output_wanted(1)
                     ? &ctx.allocate_output(1, x.dtype(), state)
                     : nullptr;
    Tensor* yc = cell_ == Cell::LSTM && ctx.num_outputs() > 2 && ctx.output_wanted(2)
                     ? &ctx.allocate_output(2, x.dtype(), state)
                     : nullptr;
    dnnl_util::ThreadScope threads(ctx.threads());
    dispatch<FloatTypes>(x.dtype(), who, [&]<typename T>() {
      Dims dm{S, B, I, H};
      run<T>(dm, x, w, r, bias, len, h0, c0, peep, y, yh, yc);
    });
  }

 private:
  struct Dims {
    int64_t S, B, I, H;
  };

  /// A T tensor as acc_t<T> values (nullptr: `n` zeros).
  template <typename T>
  static std::vector<acc_t<T>> load(const Tensor* t, int64_t n) {
    std::vector<acc_t<T>> v(n, acc_t<T>(0));
    if (t) {
      const T* p = t->data<T>();
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<acc_t<T>>(p[i]);
    }
    return v;
  }

  template <typename T>
  void run(const Dims& dm, const Tensor& xt, const Tensor& wt, const Tensor& rt, const Tensor* bt,
           const std::vector<int64_t>& len, const Tensor* h0t, const Tensor* c0t, const Tensor* pt,
           Tensor* yt, Tensor* yht, Tensor* yct) const {
    using A = acc_t<T>;
    const int64_t S = dm.S, B = dm.B, I = dm.I, H = dm.H, G = gates_, GH = G * H;
    // X in [S, B, I] order.
    std::vector<A> x = load<T>(&xt, S * B * I);
    if (layout_) {
      std::vector<A> tx(x.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
          std::copy_n(x.data() + (b * S + s) * I, I, tx.data() + (s * B + b) * I);
      x.swap(tx);
    }
    const std::vector<A> w = load<T>(&wt, dirs_ * GH * I), r = load<T>(&rt, dirs_ * GH * H),
                         bias = load<T>(bt, dirs_ * 2 * GH), peep = load<T>(pt, dirs_ * 3 * H);
    const std::vector<A> h0 = load<T>(h0t, dirs_ * B * H), c0 = load<T>(c0t, dirs_ * B * H);
    // Offsets of [dir, batch] state rows and of Y[s, dir, b] in either layout.
    auto state_at = [&](int64_t d, int64_t b) { return (layout_ ? b * dirs_ + d : d * B + b) * H; };
    auto y_at = [&](int64_t s, int64_t d, int64_t b) {
      return (layout_ ? (b * S + s) * dirs_ + d : (s * dirs_ + d) * B + b) * H;
    };
    T* y = yt ? yt->data<T>() : nullptr;
    if (y) std::fill_n(y, yt->numel(), static_cast<T>(0.f));
    std::vector<A> xw(S * B * GH), hr(B * GH), h(B * H), c(B * H), rh(B * H), hnew(H);
    for (int64_t d = 0; d < dirs_; ++d) {
      const bool rev = reverse_ || d == 1;
      const A* wd = w.data() + d * GH * I;
      const A* rd = r.data() + d * GH * H;
      const A* wb = bias.data() + d * 2 * GH;
      const A* rb = wb + GH;
      const A* pd = peep.data() + d * 3 * H;
      const Activation* act = acts_.data() + d * acts_.size() / dirs_;
      gemm(true, S * B, GH, I, x.data(), I, wd, I, A(0), xw.data(), GH);
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(h0.data() + state_at(d, b), H, h.data() + b * H);
        std::copy_n(c0.data() + state_at(d, b), H, c.data() + b * H);
      }
      for (int64_t step = 0; step < S; ++step) {
        // GRU without linear_before_reset multiplies R_h by r * h, so that part waits.
        const int64_t rows = cell_ == Cell::GRU && !linear_before_reset_ ? 2 * H : GH;
        gemm(true, B, rows, H, h.data(), H, rd, H, A(0), hr.data(), GH);
        if (cell_ == Cell::GRU && !linear_before_reset_) {
          for (int64_t b = 0; b < B; ++b) {
            if (step >= len[b]) continue;
            const int64_t s = rev ? len[b] - 1 - step : step;
            const A* g = xw.data() + (s * B + b) * GH;
            for (int64_t j = 0; j < H; ++j) {
              const A rg = act[0](clip(g[H + j] + hr[b * GH + H + j] + wb[H + j] + rb[H + j]));
              rh[b * H + j] = rg * h[b * H + j];
            }
          }
          gemm(true, B, H, H, rh.data(), H, rd + 2 * H * H, H, A(0), hr.data() + 2 * H, GH);
        }
        for (int64_t b = 0; b < B; ++b) {
          if (step >= len[b]) continue;
          const int64_t s = rev ? len[b] - 1 - step : step;
          const A* g = xw.data() + (s * B + b) * GH;
          const A* q = hr.data() + b * GH;
          A* hb = h.data() + b * H;
          A* cb = c.data() + b * H;
          if (cell_ == Cell::RNN) {
            for (int64_t j = 0; j < H; ++j) hb[j] = act[0](clip(g[j] + q[j] + wb[j] + rb[j]));
          } else if (cell_ == Cell::GRU) {
            for (int64_t j = 0; j < H; ++j) {
              const A z = act[0](clip(g[j] + q[j] + wb[j] + rb[j]));
              A pre;
              if (linear_before_reset_) {
                const A rg = act[0](clip(g[H + j] + q[H + j] + wb[H + j] + rb[H + j]));
                pre = g[2 * H + j] + wb[2 * H + j] + rg * (q[2 * H + j] + rb[2 * H + j]);
              } else {
                pre = g[2 * H + j] + q[2 * H + j] + wb[2 * H + j] + rb[2 * H + j];
              }
              const A ht = act[1](clip(pre));
              hnew[j] = (A(1) - z) * ht + z * hb[j];
            }
            std::copy_n(hnew.data(), H, hb);
          } else {
            for (int64_t j = 0; j < H; ++j) {
              auto pre = [&](int64_t gate) {
                return g[gate * H + j] + q[gate * H + j] + wb[gate * H + j] + rb[gate * H + j];
              };
              const A ig = act[0](clip(pre(0) + pd[j] * cb[j]));
              const A fg = input_forget_ ? A(1) - ig : act[0](clip(pre(2) + pd[2 * H + j] * cb[j]));
              const A cg = act[1](clip(pre(3)));
              cb[j] = fg * cb[j] + ig * cg;
              const A og = act[0](clip(pre(1) + pd[H + j] * cb[j]));
              hb[j] = og * act[2](cb[j]);
            }
          }
          if (y)
            for (int64_t j = 0; j < H; ++j) y[y_at(s, d, b) + j] = static_cast<T>(hb[j]);
        }
      }
      for (int64_t b = 0; b < B; ++b) {
        if (yht)
          for (int64_t j = 0; j < H; ++j)
            yht->data<T>()[state_at(d, b) + j] = static_cast<T>(h[b * H + j]);
        if (yct)
          for (int64_t j = 0; j < H; ++j)
            yct->data<T>()[state_at(d, b) + j] = static_cast<T>(c[b * H + j]);
      }
    }
  }

  template <typename A>
  A clip(A v) const {
    return has_clip_ ? std::clamp(v, A(-clip_), A(clip_)) : v;
  }

  Cell cell_;
  int64_t gates_, hidden_attr_, layout_;
  bool linear_before_reset_, input_forget_, has_clip_;
  float clip_;
  bool reverse_ = false;
  int64_t dirs_ = 1;
  std::vector<Activation> acts_;
};

}  // namespace

void register_rnn_kernels(KernelRegistry& r) {
  const std::pair<const char*, Cell> ops[] = {
      {"RNN", Cell::RNN}, {"GRU", Cell::GRU}, {"LSTM", Cell::LSTM}};
  for (const auto& [op, cell] : ops)
    r.add({op, "", 1, INT_MAX, "cpu", 0, float_types(),
           [cell = cell](const KernelInfo& info) -> std::unique_ptr<Kernel> {
             return std::make_unique<RecurrentKernel>(info, cell);
           }});
}

}  // namespace onyx::cpu
