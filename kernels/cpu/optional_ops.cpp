// Optional ops. An optional holding a value is that value (tensor or sequence); an empty
// optional is a Datum of kind None.
#include "kernels/cpu/cpu_kernels.h"

namespace onyx::cpu {
namespace {

class OptionalKernel final : public Kernel {
 public:
  explicit OptionalKernel(const KernelInfo& info) {
    if (const Attribute* a = info.node.attr("type"); a && !a->type_protos.empty()) {
      const ValueType& t = a->type_protos[0];
      elem_ = t.is_tensor() ? t.elem : (t.inner ? t.inner->elem : DataType::Undefined);
    }
  }
  void compute(KernelContext& ctx) const override {
    const Datum* d = ctx.input_datum(0);
    if (d && !d->is_none()) {
      ctx.set_output(0, *d);
      return;
    }
    Datum none;
    none.elem_type = elem_;
    ctx.set_output(0, std::move(none));
  }

 private:
  DataType elem_ = DataType::Undefined;
};

void optional_has_element(KernelContext& ctx) {
  const Datum* d = ctx.input_datum(0);
  *ctx.allocate_output(0, DataType::Bool, {}).data<bool>() = d && !d->is_none();
}

void optional_get_element(KernelContext& ctx) {
  const Datum* d = ctx.input_datum(0);
  ONYX_CHECK(d && !d->is_none(), "[{}] the optional input is empty", ctx.label());
  ctx.set_output(0, *d);
}

}  // namespace

void register_optional_kernels(KernelRegistry& r) {
  r.add({.op_type = "Optional",
         .since = 15,
         .type_input = -1,
         .create = make_factory<OptionalKernel>()});
  r.add({.op_type = "OptionalHasElement",
         .since = 15,
         .type_input = -1,
         .create = function_factory(optional_has_element)});
  r.add({.op_type = "OptionalGetElement",
         .since = 15,
         .type_input = -1,
         .create = function_factory(optional_get_element)});
}

}  // namespace onyx::cpu
