#include "kernels/kernel.h"

#include <algorithm>
#include <climits>

namespace onyx {

const Tensor* KernelContext::input(int i) const {
  const Datum* d = input_datum(i);
  if (!d || d->is_none()) return nullptr;
  ONYX_CHECK(d->is_tensor(), "[{}] input {} should be a tensor but is a sequence", label(), i);
  return &d->tensor;
}

const Tensor& KernelContext::required_input(int i) const {
  const Tensor* t = i < num_inputs() ? input(i) : nullptr;
  ONYX_CHECK(t, "[{}] required input {} is missing", label(), i);
  return *t;
}

const Tensor* KernelInfo::constant_input(int i) const {
  if (!node.has_input(i)) return nullptr;
  for (const Graph* g = &graph; g; g = g->parent)
    if (const Tensor* t = g->initializer(node.inputs[i])) return t;
  return nullptr;
}

void KernelRegistry::add(KernelDef def) {
  def.domain = canonical_domain(def.domain);
  // Two registrations that could both match one node would make lookup order-dependent.
  for (const auto& d : defs_) {
    if (d.op_type != def.op_type || d.domain != def.domain || d.provider != def.provider) continue;
    bool opsets_overlap = d.since <= def.until && def.since <= d.until;
    bool types_overlap = d.types.empty() || def.types.empty() ||
                         std::any_of(d.types.begin(), d.types.end(), [&](DataType t) {
                           return std::find(def.types.begin(), def.types.end(), t) != def.types.end();
                         });
    if (opsets_overlap && types_overlap)
      ONYX_THROW("[registry] {} kernel for {} registered twice for overlapping opsets and dtypes",
                 def.provider, def.op_type);
  }
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::find(const std::string& op, const std::string& domain, int64_t opset,
                                      const std::string& provider, DataType dtype,
                                      std::string* why) const {
  std::string dom = canonical_domain(domain);
  bool op_seen = false, opset_seen = false;
  std::vector<std::string> accepted, opsets, other_domains;
  for (const auto& d : defs_) {
    if (d.op_type != op || d.provider != provider) continue;
    if (d.domain != dom) {
      other_domains.push_back(fmt::format("'{}'", d.domain.empty() ? "ai.onnx" : d.domain));
      continue;
    }
    op_seen = true;
    opsets.push_back(d.until == INT_MAX ? fmt::format("{}+", d.since) : fmt::format("{}-{}", d.since, d.until));
    if (opset < d.since || opset > d.until) continue;
    opset_seen = true;
    if (d.type_input < 0 || d.types.empty() || dtype == DataType::Undefined ||
        std::find(d.types.begin(), d.types.end(), dtype) != d.types.end())
      return &d;
    for (DataType t : d.types) accepted.push_back(dtype_name(t));
  }
  if (why) {
    // Names the domain and opset too: an op is only found under the domain it is imported from.
    std::string what = fmt::format("op '{}' in domain '{}' (opset {}{}) on provider {}", op,
                                   dom.empty() ? "ai.onnx" : dom, opset,
                                   opset == 0 ? ", not imported by the model" : "", provider);
    std::sort(other_domains.begin(), other_domains.end());
    other_domains.erase(std::unique(other_domains.begin(), other_domains.end()), other_domains.end());
    if (!op_seen && other_domains.empty())
      *why = fmt::format("no kernel for {}: onyx has no kernel of that name there", what);
    else if (!op_seen)
      *why = fmt::format("no kernel for {}: onyx has '{}' only in domain {}", what, op,
                         fmt::join(other_domains, ", "));
    else if (!opset_seen)
      *why = fmt::format("no kernel for {}: its kernels cover opsets {}", what, fmt::join(opsets, ", "));
    else
      *why = fmt::format("the kernel for {} does not take {} (takes {})", what, dtype_name(dtype),
                         fmt::join(accepted, ", "));
  }
  return nullptr;
}

KernelFactory function_factory(FunctionKernel::Fn fn) {
  return [fn](const KernelInfo&) -> std::unique_ptr<Kernel> { return std::make_unique<FunctionKernel>(fn); };
}

std::vector<DataType> operator+(std::vector<DataType> a, const std::vector<DataType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
std::vector<DataType> float_types() {
  return {DataType::Float, DataType::Double, DataType::Float16, DataType::BFloat16};
}
std::vector<DataType> signed_int_types() {
  return {DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64};
}
std::vector<DataType> unsigned_int_types() {
  return {DataType::UInt8, DataType::UInt16, DataType::UInt32, DataType::UInt64};
}
std::vector<DataType> int_types() { return signed_int_types() + unsigned_int_types(); }
std::vector<DataType> numeric_types() { return float_types() + int_types(); }
std::vector<DataType> all_types() {
  return numeric_types() + std::vector<DataType>{DataType::Bool, DataType::String};
}

}  // namespace onyx
