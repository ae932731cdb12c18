// Sequence ops: build, edit and read sequences of tensors, split a tensor into one, concat
// one back, and map a subgraph over one (SequenceMap).
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/move_util.h"

namespace onyx::cpu {
namespace {

const std::vector<Tensor>& input_sequence(KernelContext& ctx, int i) {
  const Datum* d = ctx.input_datum(i);
  ONYX_CHECK(d && d->is_sequence(), "[{}] input {} must be a sequence, got {}", ctx.label(), i,
             !d || d->is_none() ? "nothing" : "a tensor");
  return d->sequence;
}

DataType sequence_elem(KernelContext& ctx, int i) {
  const Datum& d = *ctx.input_datum(i);
  return d.sequence.empty() ? d.elem_type : d.sequence[0].dtype();
}

// Position input (int32/int64 scalar) mapped into [0, n + extra); extra = 1 for inserts.
int64_t position(KernelContext& ctx, int i, int64_t n, int64_t extra, int64_t def) {
  const Tensor* p = ctx.input(i);
  if (!p) return def;
  ONYX_CHECK(p->numel() == 1 && (p->dtype() == DataType::Int64 || p->dtype() == DataType::Int32),
             "[{}] position must be an int32/int64 scalar, got {} {}", ctx.label(),
             dtype_name(p->dtype()), shape_str(p->shape()));
  int64_t pos = p->to_int64_vector()[0];
  ONYX_CHECK(pos >= -n && pos < n + extra, "[{}] position {} is out of range [{}, {}]", ctx.label(),
             pos, -n, n + extra - 1);
  return pos < 0 ? pos + n : pos;
}

// Copies `rows` blocks of `len` elements between strided places (strings element-wise).
void copy_blocks(DataType dt, void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                 int64_t rows, int64_t len) {
  dispatch_move(dt, "copy", [&]<typename T>() {
    auto* d = static_cast<T*>(dst);
    const auto* s = static_cast<const T*>(src);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(s + r * src_stride, s + r * src_stride + len, d + r * dst_stride);
  });
}

void sequence_empty(KernelContext& ctx, DataType dtype) {
  ctx.set_output(0, Datum::of_sequence({}, dtype));
}

void sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> seq;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& t = ctx.required_input(i);
    ONYX_CHECK(seq.empty() || t.dtype() == seq[0].dtype(),
               "[{}] all inputs must share a dtype: input 0 is {}, input {} is {}", ctx.label(),
               dtype_name(seq[0].dtype()), i, dtype_name(t.dtype()));
    seq.push_back(t);
  }
  DataType dt = seq.empty() ? DataType::Undefined : seq[0].dtype();
  ctx.set_output(0, Datum::of_sequence(std::move(seq), dt));
}

void sequence_insert(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  DataType elem = sequence_elem(ctx, 0);
  const Tensor& t = ctx.required_input(1);
  ONYX_CHECK(elem == DataType::Undefined || t.dtype() == elem,
             "[{}] cannot insert a {} tensor into a sequence of {}", ctx.label(),
             dtype_name(t.dtype()), dtype_name(elem));
  auto n = static_cast<int64_t>(seq.size());
  int64_t pos = position(ctx, 2, n, 1, n);
  seq.insert(seq.begin() + pos, t);
  ctx.set_output(0, Datum::of_sequence(std::move(seq), t.dtype()));
}

void sequence_at(KernelContext& ctx) {
  const std::vector<Tensor>& seq = input_sequence(ctx, 0);
  auto n = static_cast<int64_t>(seq.size());
  ONYX_CHECK(n > 0, "[{}] cannot read from an empty sequence", ctx.label());
  ctx.set_output(0, Datum(seq[position(ctx, 1, n, 0, 0)]));
}

void sequence_erase(KernelContext& ctx) {
  std::vector<Tensor> seq = input_sequence(ctx, 0);
  DataType elem = sequence_elem(ctx, 0);
  auto n = static_cast<int64_t>(seq.size());
  ONYX_CHECK(n > 0, "[{}] cannot erase from an empty sequence", ctx.label());
  seq.erase(seq.begin() + position(ctx, 1, n, 0, n - 1));
  ctx.set_output(0, Datum::of_sequence(std::move(seq), elem));
}

void sequence_length(KernelContext& ctx) {
  auto n = static_cast<int64_t>(input_sequence(ctx, 0).size());
  *ctx.allocate_output(0, DataType::Int64, {}).data<int64_t>() = n;
}

class SplitToSequenceKernel final : public Kernel {
 public:
  explicit SplitToSequenceKernel(const KernelInfo& info)
      : axis_(info.node.attr_int("axis", 0)), keepdims_(info.node.attr_int("keepdims", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    const Tensor* split = ctx.input(1);
    ONYX_CHECK(x.rank() > 0, "[{}] input must have rank >= 1, got a scalar", ctx.label());
    int64_t axis = normalize_axis(axis_, x.rank(), ctx.label());
    int64_t dim = x.shape()[axis];
    std::vector<int64_t> lengths;
    // One tensor per piece: an empty input can have a huge axis (shape [0, 2^40]) whose pieces
    // would be counted before any memory check.
    constexpr int64_t kMaxPieces = int64_t{1} << 24;
    auto check_pieces = [&](int64_t pieces) {
      ONYX_CHECK(pieces <= kMaxPieces, "[{}] splitting axis {} of shape {} makes {} sequence elements; at most 2^24 are supported",
                 ctx.label(), axis, shape_str(x.shape()), pieces);
    };
    if (!split) {
      check_pieces(dim);
      lengths.assign(static_cast<size_t>(dim), 1);
    } else if (split->rank() == 0) {
      int64_t len = split->to_int64_vector()[0];
      ONYX_CHECK(len > 0, "[{}] split must be positive, got {}", ctx.label(), len);
      check_pieces(dim / len + (dim % len != 0));
      for (int64_t p = 0; p < dim; p += lengths.back()) lengths.push_back(std::min(len, dim - p));
    } else {
      ONYX_CHECK(split->rank() == 1, "[{}] split must be a scalar or 1-D, got shape {}",
                 ctx.label(), shape_str(split->shape()));
      lengths = split->to_int64_vector();
      int64_t sum = 0;
      for (int64_t l : lengths) {
        ONYX_CHECK(l >= 0 && !__builtin_add_overflow(sum, l, &sum),
                   "[{}] split lengths must be >= 0 and sum within int64, got {}", ctx.label(), shape_str(lengths));
      }
      ONYX_CHECK(sum == dim, "[{}] split lengths sum to {} but axis {} has size {}", ctx.label(),
                 sum, axis, dim);
    }
    bool squeeze = !split && !keepdims_;
    int64_t outer = dims_product(x.shape(), 0, axis),
            inner = dims_product(x.shape(), axis + 1, x.rank());
    size_t es = dtype_size(x.dtype());
    std::vector<Tensor> seq;
    int64_t pos = 0;
    for (int64_t len : lengths) {
      Shape s = x.shape();
      s[axis] = len;
      Tensor part = ctx.scratch(x.dtype(), s);
      copy_blocks(x.dtype(), part.raw(), len * inner,
                  static_cast<const char*>(x.raw()) + pos * inner * es, dim * inner, outer,
                  len * inner);
      if (squeeze) s.erase(s.begin() + axis);
      seq.push_back(part.reshape(s));
      pos += len;
    }
    ctx.set_output(0, Datum::of_sequence(std::move(seq), x.dtype()));
  }

 private:
  int64_t axis_;
  bool keepdims_;
};

class ConcatFromSequenceKernel final : public Kernel {
 public:
  explicit ConcatFromSequenceKernel(const KernelInfo& info)
      : axis_(info.node.require_attr("axis", Attribute::Type::Int).i),
        new_axis_(info.node.attr_int("new_axis", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const std::vector<Tensor>& seq = input_sequence(ctx, 0);
    ONYX_CHECK(!seq.empty(), "[{}] cannot concatenate an empty sequence", ctx.label());
    const Tensor& first = seq[0];
    int64_t out_rank = first.rank() + (new_axis_ ? 1 : 0);
    ONYX_CHECK(out_rank > 0, "[{}] cannot concatenate scalars without new_axis", ctx.label());
    int64_t axis = normalize_axis(axis_, out_rank, ctx.label());
    // With new_axis each element is viewed with a 1 inserted at `axis`.
    auto shape_of = [&](const Tensor& t) {
      Shape s = t.shape();
      if (new_axis_) s.insert(s.begin() + axis, 1);
      return s;
    };
    Shape out = shape_of(first);
    out[axis] = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      // Ranks first: an element of another rank has no `axis` to view a 1 at.
      bool ok = seq[i].dtype() == first.dtype() && seq[i].rank() == first.rank();
      Shape s = ok ? shape_of(seq[i]) : Shape{};
      for (size_t d = 0; ok && d < s.size(); ++d)
        ok = static_cast<int64_t>(d) == axis || s[d] == out[d];
      ONYX_CHECK(
          ok, "[{}] element {} is {} {} but element 0 is {} {} (all must match except on axis {})",
          ctx.label(), i, dtype_name(seq[i].dtype()), shape_str(seq[i].shape()),
          dtype_name(first.dtype()), shape_str(first.shape()), axis);
      out[axis] += s[axis];
    }
    Tensor& y = ctx.allocate_output(0, first.dtype(), out);
    int64_t outer = dims_product(out, 0, axis), inner = dims_product(out, axis + 1, out.size());
    size_t es = dtype_size(first.dtype());
    int64_t pos = 0;
    for (const Tensor& t : seq) {
      int64_t len = shape_of(t)[axis];
      copy_blocks(first.dtype(), static_cast<char*>(y.raw()) + pos * inner * es, out[axis] * inner,
                  t.raw(), len * inner, outer, len * inner);
      pos += len;
    }
  }

 private:
  int64_t axis_;
  bool new_axis_;
};

class SequenceMapKernel final : public Kernel {
 public:
  explicit SequenceMapKernel(const KernelInfo& info)
      : body_(*info.node.require_attr("body", Attribute::Type::Graph).g) {}

  void compute(KernelContext& ctx) const override {
    const std::vector<Tensor>& seq = input_sequence(ctx, 0);
    ONYX_CHECK(static_cast<int>(body_.inputs.size()) == ctx.num_inputs(),
               "[{}] body takes {} inputs but the node has {}", ctx.label(), body_.inputs.size(),
               ctx.num_inputs());
    for (int j = 1; j < ctx.num_inputs(); ++j) {
      const Datum* d = ctx.input_datum(j);
      ONYX_CHECK(d && !d->is_none(), "[{}] additional input {} is missing", ctx.label(), j);
      ONYX_CHECK(!d->is_sequence() || d->sequence.size() == seq.size(),
                 "[{}] input {} is a sequence of {} but input 0 has {} elements", ctx.label(), j,
                 d->sequence.size(), seq.size());
    }
    std::vector<std::vector<Tensor>> outs(body_.outputs.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      std::vector<Datum> ins{Datum(seq[i])};
      for (int j = 1; j < ctx.num_inputs(); ++j) {
        const Datum& d = *ctx.input_datum(j);
        ins.push_back(d.is_sequence() ? Datum(d.sequence[i]) : d);
      }
      std::vector<Datum> res = ctx.run_subgraph(body_, ins);
      for (size_t k = 0; k < outs.size(); ++k) {
        ONYX_CHECK(res[k].is_tensor(), "[{}] body output {} is not a tensor", ctx.label(), k);
        outs[k].push_back(std::move(res[k].tensor));
      }
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      DataType elem =
          body_.outputs[k]->type.is_tensor() ? body_.outputs[k]->type.elem : DataType::Undefined;
      ctx.set_output(static_cast<int>(k), Datum::of_sequence(std::move(outs[k]), elem));
    }
  }

 private:
  const Graph& body_;
};

}  // namespace

void register_sequence_kernels(KernelRegistry& r) {
  r.add({.op_type = "SequenceEmpty",
         .since = 11,
         .type_input = -1,
         .create = [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
           auto dt = static_cast<DataType>(info.node.attr_int("dtype", 1));
           return std::make_unique<FunctionKernel>(
               [dt](KernelContext& ctx) { sequence_empty(ctx, dt); });
         }});
  r.add({.op_type = "SequenceConstruct",
         .since = 11,
         .types = movable_types(),
         .create = function_factory(sequence_construct)});
  r.add({.op_type = "SequenceInsert",
         .since = 11,
         .type_input = 1,
         .types = movable_types(),
         .create = function_factory(sequence_insert)});
  r.add({.op_type = "SequenceAt",
         .since = 11,
         .type_input = -1,
         .create = function_factory(sequence_at)});
  r.add({.op_type = "SequenceErase",
         .since = 11,
         .type_input = -1,
         .create = function_factory(sequence_erase)});
  r.add({.op_type = "SequenceLength",
         .since = 11,
         .type_input = -1,
         .create = function_factory(sequence_length)});
  r.add({.op_type = "SplitToSequence",
         .since = 11,
         .types = movable_types(),
         .create = make_factory<SplitToSequenceKernel>()});
  r.add({.op_type = "ConcatFromSequence",
         .since = 11,
         .type_input = -1,
         .create = make_factory<ConcatFromSequenceKernel>()});
  r.add({.op_type = "SequenceMap",
         .since = 17,
         .type_input = -1,
         .create = make_factory<SequenceMapKernel>()});
}

}  // namespace onyx::cpu
