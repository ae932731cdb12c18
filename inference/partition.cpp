#include "inference/partition.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>

#include "graph/shape_inference.h"
#include "inference/executor.h"
#include "inference/fusion_util.h"

namespace onyx {
namespace {

bool has_subgraph(const Node& n) {
  for (const auto& [name, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

bool is_int_tensor(const Value* v) {
  return v && v->type.is_tensor() &&
         (v->type.elem == DataType::Int64 || v->type.elem == DataType::Int32);
}

bool contains(const std::vector<int>& list, int i) { return std::find(list.begin(), list.end(), i) != list.end(); }

/// Nodes that compute small integer tensors from shapes and constants: Shape and Size, and
/// every node whose outputs are int32/int64 and whose inputs all come from such nodes or
/// initializers (Gather of a shape, Concat of dims, ...). They run on the CPU, where their
/// consumers (Reshape's shape, Expand's shape) want them anyway.
std::unordered_set<const Node*> shape_computations(const Graph& g, const std::vector<Node*>& order) {
  std::unordered_set<const Node*> host;
  std::unordered_set<const Value*> shape_values;
  for (const Node* n : order) {
    bool is_shape = canonical_domain(n->domain).empty() && (n->op_type == "Shape" || n->op_type == "Size");
    bool fits = is_shape;
    if (!fits && !has_subgraph(*n) && !n->outputs.empty()) {
      fits = std::all_of(n->outputs.begin(), n->outputs.end(), [](const Value* v) { return !v || is_int_tensor(v); });
      for (const Value* v : n->inputs)
        if (v && !g.is_initializer(v) && !shape_values.count(v)) fits = false;
    }
    if (!fits) continue;
    host.insert(n);
    for (const Value* v : n->outputs)
      if (v) shape_values.insert(v);
  }
  return host;
}

class Partitioner {
 public:
  Partitioner(Model& model, Placement& p) : model_(model), g_(*model.graph), p_(p) {}

  void run() {
    std::vector<Node*> order = g_.topological_order();
    const std::unordered_set<const Node*> host = shape_computations(g_, order);
    // Values a subgraph (If/Loop/Scan body, run on the CPU) reads from this graph by name
    // cannot be redirected to a copy: their producers run on the CPU.
    std::unordered_set<const Node*> forced;
    for (const Node* n : order)
      for (const Value* v : n->implicit_inputs)
        if (v && v->producer) forced.insert(v->producer);
    for (Node* n : order) assign(*n, host.count(n) || forced.count(n) || has_subgraph(*n), host.count(n));
    import_domain(model_, "ai.onyx");  // the copy nodes' domain (an unused import is harmless)
    size_t copies = 0;
    for (Node* n : order) copies += insert_copies(*n);
    spdlog::info("partition: {} nodes on {}, {} on cpu ({} fallback), {} copy nodes",
                 order.size() - count_cpu(order), p_.providers.front()->name(), count_cpu(order),
                 p_.fallback.size(), copies);
  }

 private:
  size_t count_cpu(const std::vector<Node*>& order) const {
    return std::count_if(order.begin(), order.end(), [&](const Node* n) { return p_.index_of(n) == p_.cpu_index(); });
  }

  void assign(Node& n, bool on_cpu, bool shape_computation) {
    int idx = p_.cpu_index();
    if (!on_cpu)
      for (int i = 0; i < p_.cpu_index(); ++i)
        if (const KernelDef* d = find_kernel_def(n, model_, *p_.providers[i], nullptr, /*typed=*/true);
            d && accepts(*d, n)) {
          idx = i;
          def_[&n] = d;
          break;
        }
    if (idx == p_.cpu_index()) {
      def_[&n] = find_kernel_def(n, model_, *p_.providers.back(), nullptr, false);
      if (!shape_computation) p_.fallback.insert(&n);
    }
    p_.provider_of[&n] = idx;
  }

  /// A device kernel may refuse a node its registration matched (an attribute it does not
  /// cover, such as Cast to string): built here once, NotImplemented sends the node to the CPU.
  bool accepts(const KernelDef& d, const Node& n) const {
    try {
      d.create(KernelInfo{n, model_.opset(n.domain), g_});
      return true;
    } catch (const NotImplemented& e) {
      spdlog::info("partition: {} stays on the CPU: {}", n.label(), e.what());
      return false;
    }
  }

  /// Where v's bytes are: the producer's device, the host for graph inputs, initializers and
  /// outputs a kernel writes to the host.
  Device location(const Value* v) const {
    if (!v->producer) return {};
    const Node* prod = v->producer;
    auto it = def_.find(prod);
    if (it != def_.end() && it->second && contains(it->second->host_outputs, v->producer_output)) return {};
    return p_.provider(prod).device();
  }

  /// Where the kernel of `n` wants input i; nullopt when it reads only the shape.
  std::optional<Device> wanted(const Node& n, int i) const {
    auto it = def_.find(&n);
    const KernelDef* d = it == def_.end() ? nullptr : it->second;
    if (d && contains(d->shape_only_inputs, i)) return std::nullopt;
    if (d && contains(d->host_inputs, i)) return Device{};
    return p_.provider(&n).device();
  }

  size_t insert_copies(Node& n) {
    size_t made = 0;
    for (int i = 0; i < n.num_inputs(); ++i) {
      Value* v = n.inputs[i];
      // Sequences, optionals and maps live on the host; their ops have CPU kernels only.
      if (!v || (v->type.kind != ValueType::Kind::Tensor && v->type.kind != ValueType::Kind::Unknown)) continue;
      std::optional<Device> want = wanted(n, i);
      if (!want) continue;
      Device have = location(v);
      if (have == *want) continue;
      auto key = std::make_pair(v, want->str());
      auto it = copies_.find(key);
      if (it == copies_.end()) {
        it = copies_.emplace(key, make_copy(v, have, *want)).first;
        ++made;
      }
      g_.set_input(&n, i, it->second);
    }
    return made;
  }

  Value* make_copy(Value* v, Device from, Device to) {
    ONYX_CHECK(from.type == DeviceType::CPU || to.type == DeviceType::CPU,
               "[partition] '{}' would move from {} to {}: copies between two devices are not supported",
               v->name, from.str(), to.str());
    const bool to_device = to.type != DeviceType::CPU;
    const Device dev = to_device ? to : from;
    int idx = -1;
    for (int i = 0; i < p_.cpu_index(); ++i)
      if (p_.providers[i]->device() == dev) idx = i;
    ONYX_CHECK(idx >= 0, "[partition] no provider owns {}", dev.str());
    Value* out = g_.add_unique_value(v->name + (to_device ? "_" + dev.str() : "_host"));
    out->type = v->type;
    const char* op = to_device ? "MemcpyFromHost" : "MemcpyToHost";
    Node* c = g_.add_node(op, {v}, {out}, "ai.onyx", std::string(op) + "_" + v->name);
    p_.provider_of[c] = idx;
    def_[c] = find_kernel_def(*c, model_, *p_.providers[idx], nullptr, false);
    ONYX_CHECK(def_[c], "[partition] provider {} has no {} kernel", p_.providers[idx]->name(), op);
    return out;
  }

  Model& model_;
  Graph& g_;
  Placement& p_;
  std::unordered_map<const Node*, const KernelDef*> def_;
  std::map<std::pair<const Value*, std::string>, Value*> copies_;
};

}  // namespace

Placement cpu_placement(std::shared_ptr<ExecutionProvider> cpu) {
  Placement p;
  p.providers = {std::move(cpu)};
  return p;
}

Placement partition_graph(Model& model, std::vector<std::shared_ptr<ExecutionProvider>> providers) {
  ONYX_CHECK(!providers.empty() && providers.back()->device().type == DeviceType::CPU,
             "[partition] the CPU provider must come last");
  Placement p;
  p.providers = std::move(providers);
  if (p.providers.size() == 1) return p;
  // Kernel lookup by dtype needs every value typed.
  infer_types_and_shapes(model);
  Partitioner(model, p).run();
  model.graph->sort_topologically();
  return p;
}

}  // namespace onyx
