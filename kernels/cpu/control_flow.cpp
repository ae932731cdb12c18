// If, Loop and Scan: run their body subgraphs through KernelContext::run_subgraph.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace onyx::cpu {
namespace {

const Graph& graph_attr(const Node& node, const char* name) {
  const Attribute& a = node.require_attr(name, Attribute::Type::Graph);
  return *a.g;
}

bool scalar_bool(const Tensor& t, const std::string& who, const char* what) {
  ONYX_CHECK(t.numel() == 1, "[{}] {} must hold one value, got shape {}", who, what, shape_str(t.shape()));
  ONYX_CHECK(t.dtype() == DataType::Bool, "[{}] {} must be bool, got {}", who, what, dtype_name(t.dtype()));
  return *t.data<bool>();
}

// Copies `count` elements; strings element by element.
void copy_elems(DataType dt, void* dst, const void* src, int64_t count) {
  if (count <= 0) return;
  if (dt == DataType::String) {
    auto* d = static_cast<std::string*>(dst);
    const auto* s = static_cast<const std::string*>(src);
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
  } else {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size(dt));
  }
}

// Stacks equally-shaped tensors along a new axis `axis` of the result.
Tensor stack(const std::vector<Tensor>& parts, int64_t axis, KernelContext& ctx, int out_index,
             DataType empty_dtype) {
  if (parts.empty()) return ctx.allocate_output(out_index, empty_dtype, {0});
  const Shape& s = parts[0].shape();
  int64_t rank = static_cast<int64_t>(s.size()) + 1;
  if (axis < 0) axis += rank;
  ONYX_CHECK(axis >= 0 && axis < rank, "[{}] scan output axis out of range", ctx.label());
  Shape out_shape = s;
  out_shape.insert(out_shape.begin() + axis, static_cast<int64_t>(parts.size()));
  DataType dt = parts[0].dtype();
  Tensor& out = ctx.allocate_output(out_index, dt, out_shape);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = static_cast<size_t>(axis); i < s.size(); ++i) inner *= s[i];
  size_t es = dtype_size(dt);
  auto n = static_cast<int64_t>(parts.size());
  for (int64_t p = 0; p < n; ++p) {
    ONYX_CHECK(parts[p].shape() == s && parts[p].dtype() == dt,
               "[{}] iteration {} produced {}{} but earlier ones produced {}{}", ctx.label(), p,
               dtype_name(parts[p].dtype()), shape_str(parts[p].shape()), dtype_name(dt), shape_str(s));
    for (int64_t o = 0; o < outer; ++o)
      copy_elems(dt, static_cast<char*>(out.raw()) + ((o * n + p) * inner) * es,
                 static_cast<const char*>(parts[p].raw()) + o * inner * es, inner);
  }
  return out;
}

// Slice `index` of `t` along `axis`, with that axis removed.
Tensor take_slice(const Tensor& t, int64_t axis, int64_t index, KernelContext& ctx) {
  Shape s = t.shape();
  int64_t n = s[axis];
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) inner *= s[i];
  s.erase(s.begin() + axis);
  Tensor out = ctx.scratch(t.dtype(), s);
  size_t es = dtype_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o)
    copy_elems(t.dtype(), static_cast<char*>(out.raw()) + o * inner * es,
               static_cast<const char*>(t.raw()) + ((o * n + index) * inner) * es, inner);
  return out;
}

DataType declared_elem(const Graph& body, size_t output) {
  if (output >= body.outputs.size()) return DataType::Float;
  const ValueType& t = body.outputs[output]->type;
  return t.is_tensor() && t.elem != DataType::Undefined ? t.elem : DataType::Float;
}

class IfKernel final : public Kernel {
 public:
  explicit IfKernel(const KernelInfo& info)
      : then_(graph_attr(info.node, "then_branch")), else_(graph_attr(info.node, "else_branch")) {}
  void compute(KernelContext& ctx) const override {
    bool cond = scalar_bool(ctx.required_input(0), ctx.label(), "cond");
    std::vector<Datum> outs = ctx.run_subgraph(cond ? then_ : else_, {});
    ONYX_CHECK(static_cast<int>(outs.size()) == ctx.num_outputs(),
               "[{}] branch produced {} outputs, the node has {}", ctx.label(), outs.size(), ctx.num_outputs());
    for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(outs[i]));
  }

 private:
  const Graph& then_;
  const Graph& else_;
};

class LoopKernel final : public Kernel {
 public:
  explicit LoopKernel(const KernelInfo& info) : body_(graph_attr(info.node, "body")) {
    // The body returns the condition, each loop-carried value, then the scan outputs; fewer
    // than 1 + carried would make the scan-output count negative.
    const size_t n_carried = static_cast<size_t>(std::max(0, info.node.num_inputs() - 2));
    ONYX_CHECK(body_.outputs.size() >= 1 + n_carried,
               "[{}] the body has {} outputs, expected at least {}: the condition, then one per "
               "loop-carried value ({})",
               info.label(), body_.outputs.size(), 1 + n_carried, n_carried);
  }
  void compute(KernelContext& ctx) const override {
    const Tensor* max_trip = ctx.input(0);
    const Tensor* cond_in = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    int64_t trips = max_trip ? max_trip->to_int64_vector().at(0) : INT64_MAX;
    bool cond = cond_in ? scalar_bool(*cond_in, ctx.label(), "cond") : true;
    size_t n_carried = static_cast<size_t>(std::max(0, ctx.num_inputs() - 2));
    std::vector<Datum> carried;
    for (size_t i = 0; i < n_carried; ++i) {
      const Datum* d = ctx.input_datum(static_cast<int>(i + 2));
      carried.push_back(d ? *d : Datum());
    }
    size_t n_scan = body_.outputs.size() - 1 - n_carried;
    std::vector<std::vector<Tensor>> scans(n_scan);
    for (int64_t it = 0; it < trips && cond; ++it) {
      std::vector<Datum> ins{Datum(Tensor::scalar<int64_t>(it)), Datum(Tensor::scalar<bool>(cond))};
      ins.insert(ins.end(), carried.begin(), carried.end());
      std::vector<Datum> outs = ctx.run_subgraph(body_, ins);
      cond = scalar_bool(outs.at(0).tensor, ctx.label(), "body's cond output");
      for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(outs[1 + i]);
      for (size_t i = 0; i < n_scan; ++i) {
        ONYX_CHECK(outs[1 + n_carried + i].is_tensor(), "[{}] scan output {} is not a tensor", ctx.label(), i);
        scans[i].push_back(outs[1 + n_carried + i].tensor);
      }
    }
    for (size_t i = 0; i < n_carried; ++i) ctx.set_output(static_cast<int>(i), std::move(carried[i]));
    for (size_t i = 0; i < n_scan; ++i)
      stack(scans[i], 0, ctx, static_cast<int>(n_carried + i), declared_elem(body_, 1 + n_carried + i));
  }

 private:
  const Graph& body_;
};

class ScanKernel final : public Kernel {
 public:
  explicit ScanKernel(const KernelInfo& info)
      : body_(graph_attr(info.node, "body")), batched_(info.opset < 9) {
    const Node& n = info.node;
    num_scan_inputs_ = n.require_attr("num_scan_inputs", Attribute::Type::Int).i;
    // Scan-8 names the input directions `directions`; it has no axes attributes.
    in_axes_ = n.attr_ints("scan_input_axes");
    in_dirs_ = n.attr_ints(batched_ ? "directions" : "scan_input_directions");
    out_axes_ = n.attr_ints("scan_output_axes");
    out_dirs_ = n.attr_ints("scan_output_directions");
    // The body returns each state variable, then the scan outputs; fewer outputs than state
    // variables would make the scan-output count negative (found by fuzzing).
    const int64_t n_state = n.num_inputs() - (batched_ ? 1 : 0) - num_scan_inputs_;
    ONYX_CHECK(num_scan_inputs_ >= 0 && n_state >= 0,
               "[{}] num_scan_inputs is {} but the node has {} inputs", info.label(), num_scan_inputs_,
               n.num_inputs());
    ONYX_CHECK(body_.outputs.size() >= static_cast<size_t>(n_state),
               "[{}] the body has {} outputs, expected at least {}: one per state variable, then "
               "the scan outputs",
               info.label(), body_.outputs.size(), n_state);
  }
  void compute(KernelContext& ctx) const override {
    if (batched_) return compute_batched(ctx);
    int64_t n_state = ctx.num_inputs() - num_scan_inputs_;
    ONYX_CHECK(n_state >= 0, "[{}] has {} inputs but num_scan_inputs is {}", ctx.label(), ctx.num_inputs(),
               num_scan_inputs_);
    std::vector<Datum> state;
    for (int64_t i = 0; i < n_state; ++i) {
      const Datum* d = ctx.input_datum(static_cast<int>(i));
      ONYX_CHECK(d && !d->is_none(), "[{}] state variable {} (input {}) is missing", ctx.label(), i, i);
      state.push_back(*d);
    }
    std::vector<const Tensor*> scan_in;
    std::vector<int64_t> axes;
    int64_t length = -1;
    for (int64_t j = 0; j < num_scan_inputs_; ++j) {
      const Tensor& t = ctx.required_input(static_cast<int>(n_state + j));
      int64_t axis = j < static_cast<int64_t>(in_axes_.size()) ? in_axes_[j] : 0;
      if (axis < 0) axis += t.rank();
      ONYX_CHECK(axis >= 0 && axis < t.rank(), "[{}] scan input {} axis out of range", ctx.label(), j);
      ONYX_CHECK(length < 0 || t.shape()[axis] == length,
                 "[{}] scan inputs disagree on sequence length ({} vs {})", ctx.label(), t.shape()[axis], length);
      length = t.shape()[axis];
      scan_in.push_back(&t);
      axes.push_back(axis);
    }
    size_t n_scan_out = body_.outputs.size() - static_cast<size_t>(n_state);
    std::vector<std::vector<Tensor>> scans(n_scan_out);
    for (int64_t it = 0; it < std::max<int64_t>(length, 0); ++it) {
      std::vector<Datum> ins = state;
      for (int64_t j = 0; j < num_scan_inputs_; ++j) {
        bool reverse = j < static_cast<int64_t>(in_dirs_.size()) && in_dirs_[j] == 1;
        ins.push_back(Datum(take_slice(*scan_in[j], axes[j], reverse ? length - 1 - it : it, ctx)));
      }
      std::vector<Datum> outs = ctx.run_subgraph(body_, ins);
      for (int64_t i = 0; i < n_state; ++i) state[i] = std::move(outs[i]);
      for (size_t k = 0; k < n_scan_out; ++k) scans[k].push_back(outs[n_state + k].tensor);
    }
    for (int64_t i = 0; i < n_state; ++i) ctx.set_output(static_cast<int>(i), std::move(state[i]));
    for (size_t k = 0; k < n_scan_out; ++k) {
      if (k < out_dirs_.size() && out_dirs_[k] == 1) std::reverse(scans[k].begin(), scans[k].end());
      int64_t axis = k < out_axes_.size() ? out_axes_[k] : 0;
      stack(scans[k], axis, ctx, static_cast<int>(n_state + k), declared_elem(body_, n_state + k));
    }
  }

 private:
  /// Scan-8: input 0 is the optional sequence_lens; states and scan inputs carry a leading
  /// batch axis (scan axis 1) and each batch row runs its own loop; scan outputs are padded
  /// with zeros past that row's length.
  void compute_batched(KernelContext& ctx) const {
    int64_t n_state = ctx.num_inputs() - 1 - num_scan_inputs_;
    ONYX_CHECK(n_state >= 0 && num_scan_inputs_ > 0,
               "[{}] has {} inputs but num_scan_inputs is {} (plus sequence_lens)", ctx.label(),
               ctx.num_inputs(), num_scan_inputs_);
    std::vector<const Tensor*> ins;
    for (int i = 1; i < ctx.num_inputs(); ++i) ins.push_back(&ctx.required_input(i));
    const Tensor& first = *ins[static_cast<size_t>(n_state)];
    ONYX_CHECK(first.rank() >= 2, "[{}] scan inputs need [batch, sequence, ...] but got {}",
               ctx.label(), shape_str(first.shape()));
    int64_t batch = first.shape()[0], max_len = first.shape()[1];
    for (const Tensor* t : ins)
      ONYX_CHECK(t->rank() >= 1 && t->shape()[0] == batch,
                 "[{}] every state and scan input needs batch size {} but one has shape {}",
                 ctx.label(), batch, shape_str(t->shape()));
    for (size_t j = static_cast<size_t>(n_state); j < ins.size(); ++j)
      ONYX_CHECK(ins[j]->rank() >= 2 && ins[j]->shape()[1] == max_len,
                 "[{}] scan inputs need sequence length {} but one has shape {}", ctx.label(),
                 max_len, shape_str(ins[j]->shape()));
    std::vector<int64_t> lens(static_cast<size_t>(batch), max_len);
    if (const Tensor* sl = ctx.input(0)) {
      ONYX_CHECK(sl->numel() == batch, "[{}] sequence_lens should have {} values but has shape {}",
                 ctx.label(), batch, shape_str(sl->shape()));
      lens = sl->to_int64_vector();
      for (int64_t l : lens)
        ONYX_CHECK(l >= 0 && l <= max_len, "[{}] sequence length {} is outside [0, {}]",
                   ctx.label(), l, max_len);
    }
    size_t n_out = body_.outputs.size() - static_cast<size_t>(n_state);
    // states[b][i], scans[b][k][t]
    std::vector<std::vector<Tensor>> states(static_cast<size_t>(batch));
    std::vector<std::vector<std::vector<Tensor>>> scans(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Datum> state;
      for (int64_t i = 0; i < n_state; ++i)
        state.push_back(Datum(take_slice(*ins[static_cast<size_t>(i)], 0, b, ctx)));
      std::vector<Tensor> rows;
      for (int64_t j = 0; j < num_scan_inputs_; ++j)
        rows.push_back(take_slice(*ins[static_cast<size_t>(n_state + j)], 0, b, ctx));
      auto& out = scans[static_cast<size_t>(b)];
      out.resize(n_out);
      int64_t len = lens[static_cast<size_t>(b)];
      for (int64_t it = 0; it < len; ++it) {
        std::vector<Datum> body_in = state;
        for (int64_t j = 0; j < num_scan_inputs_; ++j) {
          bool reverse = j < static_cast<int64_t>(in_dirs_.size()) && in_dirs_[j] == 1;
          body_in.push_back(Datum(take_slice(rows[j], 0, reverse ? len - 1 - it : it, ctx)));
        }
        std::vector<Datum> outs = ctx.run_subgraph(body_, body_in);
        for (int64_t i = 0; i < n_state; ++i) state[i] = std::move(outs[i]);
        for (size_t k = 0; k < n_out; ++k) out[k].push_back(outs[n_state + k].tensor);
      }
      for (auto& d : state) states[static_cast<size_t>(b)].push_back(d.tensor);
    }
    for (int64_t i = 0; i < n_state; ++i) {
      std::vector<Tensor> parts;
      for (auto& s : states) parts.push_back(s[static_cast<size_t>(i)]);
      stack(parts, 0, ctx, static_cast<int>(i), ins[static_cast<size_t>(i)]->dtype());
    }
    for (size_t k = 0; k < n_out; ++k) stack_padded(scans, k, max_len, n_state, ctx);
  }

  /// Writes scan output k as [batch, max_len, ...], zero past each row's iterations.
  void stack_padded(const std::vector<std::vector<std::vector<Tensor>>>& scans, size_t k,
                    int64_t max_len, int64_t n_state, KernelContext& ctx) const {
    const Tensor* proto = nullptr;
    for (const auto& row : scans)
      if (!row[k].empty()) proto = &row[k][0];
    DataType dt = proto ? proto->dtype() : declared_elem(body_, n_state + k);
    Shape elem = proto ? proto->shape() : Shape{};
    Shape shape{static_cast<int64_t>(scans.size()), max_len};
    shape.insert(shape.end(), elem.begin(), elem.end());
    Tensor& out = ctx.allocate_output(static_cast<int>(n_state + k), dt, shape);
    int64_t inner = shape_numel(elem);
    size_t es = dtype_size(dt);
    if (dt != DataType::String) std::memset(out.raw(), 0, out.nbytes());
    for (size_t b = 0; b < scans.size(); ++b) {
      const auto& parts = scans[b][k];
      for (size_t t = 0; t < parts.size(); ++t) {
        ONYX_CHECK(parts[t].shape() == elem && parts[t].dtype() == dt,
                   "[{}] scan output {} changed from {}{} to {}{}", ctx.label(), k, dtype_name(dt),
                   shape_str(elem), dtype_name(parts[t].dtype()), shape_str(parts[t].shape()));
        copy_elems(dt, static_cast<char*>(out.raw()) + ((static_cast<int64_t>(b) * max_len + static_cast<int64_t>(t)) * inner) * es,
                   parts[t].raw(), inner);
      }
    }
  }

  const Graph& body_;
  bool batched_;
  int64_t num_scan_inputs_ = 0;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
};

}  // namespace

void register_control_flow_kernels(KernelRegistry& r) {
  r.add({.op_type = "If", .since = 1, .type_input = -1, .create = make_factory<IfKernel>()});
  r.add({.op_type = "Loop", .since = 1, .type_input = -1, .create = make_factory<LoopKernel>()});
  r.add({.op_type = "Scan", .since = 8, .type_input = -1, .create = make_factory<ScanKernel>()});
}

}  // namespace onyx::cpu
