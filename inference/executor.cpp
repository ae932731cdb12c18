#include "inference/executor.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

namespace onyx {

const KernelDef* find_kernel_def(const Node& node, const Model& model, const ExecutionProvider& provider,
                                 std::string* why, bool typed);

namespace {

DataType static_dtype(const Node& node, int type_input) {
  if (type_input < 0 || !node.has_input(type_input)) return DataType::Undefined;
  const ValueType& t = node.inputs[type_input]->type;
  return t.is_tensor() ? t.elem : DataType::Undefined;
}

std::unique_ptr<Kernel> create_kernel(const Node& node, const Model& model, const Graph& graph,
                                      const ExecutionProvider& provider) {
  std::string why;
  const KernelDef* def = find_kernel_def(node, model, provider, &why, false);
  if (!def) throw NotImplemented(fmt::format("[session] {}: {}", node.label(), why));
  return def->create(KernelInfo{node, model.opset(node.domain), graph});
}

bool contains(const std::vector<int>& list, int i) { return std::find(list.begin(), list.end(), i) != list.end(); }

bool is_copy_node(const Node& n) {
  return n.domain == "ai.onyx" && (n.op_type == "MemcpyFromHost" || n.op_type == "MemcpyToHost");
}

class StepContext final : public KernelContext {
 public:
  /// `bound`: per slot, the caller's buffer for that output (RunOptions::output_buffers), or
  /// null; empty when nothing is bound.
  StepContext(const Step& step, Frame& frame, RunContext& rc, const std::vector<const Tensor*>& bound)
      : step_(step), frame_(frame), rc_(rc), bound_(bound) {
    discard_.resize(step.outputs.size());
  }
  const Node& node() const override { return *step_.node; }
  int num_inputs() const override { return static_cast<int>(step_.inputs.size()); }
  const Datum* input_datum(int i) const override {
    if (i < 0 || i >= num_inputs() || step_.inputs[i] < 0) return nullptr;
    const Datum& d = frame_.slots[step_.inputs[i]];
    return &d;
  }
  int num_outputs() const override { return static_cast<int>(step_.outputs.size()); }
  bool output_wanted(int i) const override {
    return i >= 0 && i < num_outputs() && step_.outputs[i] >= 0;
  }
  Datum& out_slot(int i) {
    ONYX_CHECK(i >= 0 && i < num_outputs(), "[{}] has no output {} ({} outputs)", label(), i,
               num_outputs());
    return step_.outputs[i] >= 0 ? frame_.slots[step_.outputs[i]] : discard_[i];
  }
  Tensor& allocate_output(int i, DataType dtype, const Shape& shape) override {
    Datum& d = out_slot(i);
    const bool host = i < static_cast<int>(step_.host_outputs.size()) && step_.host_outputs[i];
    const std::shared_ptr<Allocator>& alloc = host ? host_memory() : memory();
    if (const Tensor* buf = bound_output(i);
        buf && buf->dtype() == dtype && buf->shape() == shape && buf->device() == alloc->device()) {
      d = Datum(*buf);
      return d.tensor;
    }
    d = Datum(Tensor::empty(dtype, shape, alloc));
    return d.tensor;
  }
  void set_output(int i, Datum value) override { out_slot(i) = std::move(value); }
  Tensor scratch(DataType dtype, const Shape& shape) override {
    return Tensor::empty(dtype, shape, memory());
  }
  int threads() const override { return rc_.threads; }
  void* stream() const override {
    return step_.provider < static_cast<int>(rc_.resources.size()) ? rc_.resources[step_.provider]->stream()
                                                                    : nullptr;
  }
  std::optional<uint64_t> run_seed() const override { return rc_.seed; }
  std::vector<Datum> run_subgraph(const Graph& g, const std::vector<Datum>& inputs) override {
    auto it = frame_.plan->subplans.find(&g);
    ONYX_CHECK(it != frame_.plan->subplans.end(), "[{}] subgraph '{}' was not compiled", label(), g.name);
    return execute_plan(*it->second, inputs, &frame_, rc_);
  }

 private:
  const Step& step_;
  Frame& frame_;
  RunContext& rc_;
  const std::vector<const Tensor*>& bound_;
  std::vector<Datum> discard_;

  const Tensor* bound_output(int i) const {
    const int s = step_.outputs[i];
    return s >= 0 && static_cast<size_t>(s) < bound_.size() ? bound_[s] : nullptr;
  }

  const std::shared_ptr<Allocator>& host_memory() const {
    const auto& h = rc_.provider_host_allocators;
    return step_.provider < static_cast<int>(h.size()) && h[step_.provider] ? h[step_.provider] : rc_.allocator;
  }
  const std::shared_ptr<Allocator>& memory() const {
    return step_.provider < static_cast<int>(rc_.provider_allocators.size())
               ? rc_.provider_allocators[step_.provider]
               : rc_.allocator;
  }
};

/// Every input tensor is where the step's kernel reads it: a tensor on another device means
/// a copy node is missing, and the kernel must not be handed that pointer.
void check_input_devices(const Step& step, const Frame& frame) {
  for (size_t i = 0; i < step.input_devices.size(); ++i) {
    if (!step.input_devices[i] || step.inputs[i] < 0) continue;
    const Datum& d = frame.slots[step.inputs[i]];
    if (!d.is_tensor() || d.tensor.device() == *step.input_devices[i]) continue;
    ONYX_THROW("[{}] input {} ('{}') is in {} memory, but its kernel reads {} memory: a copy node is "
               "missing",
               step.node->label(), i, step.node->inputs[i]->name, d.tensor.device().str(),
               step.input_devices[i]->str());
  }
}

void compile_subgraphs(const Node& node, const Model& model, const Placement& placement, Plan& plan) {
  for (const auto& [an, a] : node.attrs) {
    if (a.g) plan.subplans[a.g.get()] = compile_plan(*a.g, model, placement);
    for (const auto& sg : a.graphs) plan.subplans[sg.get()] = compile_plan(*sg, model, placement);
  }
}

}  // namespace

const Datum* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent) {
    auto it = f->plan->slot_of.find(name);
    if (it != f->plan->slot_of.end() && !f->slots[it->second].is_none()) return &f->slots[it->second];
  }
  return nullptr;
}

const KernelDef* find_kernel_def(const Node& node, const Model& model, const ExecutionProvider& provider,
                                 std::string* why, bool typed) {
  const int64_t opset = model.opset(node.domain);
  const KernelRegistry& reg = provider.registry();
  const KernelDef* def = reg.find(node.op_type, node.domain, opset, provider.name(), DataType::Undefined, why);
  if (!def) return nullptr;
  // The registration for the node's dtype (input `type_input`), when it is known.
  DataType dt = static_dtype(node, def->type_input);
  if (dt == DataType::Undefined) return typed && !def->types.empty() ? nullptr : def;
  return reg.find(node.op_type, node.domain, opset, provider.name(), dt, why);
}

std::unique_ptr<Plan> compile_plan(const Graph& graph, const Model& model, const Placement& placement) {
  auto plan = std::make_unique<Plan>();
  plan->graph = &graph;
  for (const auto& p : placement.providers) plan->providers.push_back(p.get());
  // Subgraph bodies run on the CPU: the same provider list, no node placed elsewhere.
  Placement subgraph_placement;
  subgraph_placement.providers = placement.providers;
  auto slot_named = [&](const std::string& name) -> int {
    auto [it, fresh] = plan->slot_of.try_emplace(name, plan->num_slots);
    if (fresh) ++plan->num_slots;
    return it->second;
  };
  auto slot = [&](const Value* v) -> int { return v ? slot_named(v->name) : -1; };
  for (const auto& [name, t] : graph.initializers) plan->constants.emplace_back(slot(graph.find_value(name)), t);
  std::unordered_map<int, Tensor> constant_of;  // by value: constants grows below
  for (const auto& [s, t] : plan->constants) constant_of[s] = t;
  for (const Value* v : graph.inputs) plan->input_slots.push_back(slot(v));
  for (const std::string& n : graph.outer_scope_names()) {
    // Outer names read directly by this graph's nodes or outputs get a local slot.
    plan->outer_slots.emplace_back(n, slot_named(n));
  }
  std::vector<Node*> order = graph.topological_order();
  std::vector<int> last_use;
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& node = *order[s];
    Step step;
    step.node = &node;
    for (const Value* v : node.inputs) step.inputs.push_back(slot(v));
    for (const Value* v : node.outputs) step.outputs.push_back(slot(v));
    step.provider = placement.index_of(&node);
    const ExecutionProvider& provider = *placement.providers[step.provider];
    // A weight bound for a device is copied now, once, not on every run.
    if (is_copy_node(node) && node.op_type == "MemcpyFromHost" && constant_of.count(step.inputs[0])) {
      const Tensor& host = constant_of.at(step.inputs[0]);
      Tensor dev = Tensor::empty(host.dtype(), host.shape(), provider.allocator());
      provider.copy(host, dev, nullptr);
      plan->constants.emplace_back(step.outputs[0], dev);
      continue;
    }
    std::string why;
    const KernelDef* def = find_kernel_def(node, model, provider, &why, false);
    if (!def) throw NotImplemented(fmt::format("[session] {}: {}", node.label(), why));
    step.kernel = def->create(KernelInfo{node, model.opset(node.domain), graph});
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int idx = static_cast<int>(i);
      if (is_copy_node(node) || contains(def->shape_only_inputs, idx))
        step.input_devices.emplace_back(std::nullopt);
      else
        step.input_devices.emplace_back(contains(def->host_inputs, idx) ? Device{} : provider.device());
    }
    for (size_t o = 0; o < node.outputs.size(); ++o)
      step.host_outputs.push_back(contains(def->host_outputs, static_cast<int>(o)));
    compile_subgraphs(node, model, subgraph_placement, *plan);
    plan->steps.push_back(std::move(step));
  }
  for (const Value* v : graph.outputs) plan->output_slots.push_back(slot(v));
  // Identity passes its input on as its output: an output bound to caller memory is computed
  // there by the kernel before the Identity chain (autodiff names each gradient that way).
  std::unordered_map<int, const Step*> identity_of;
  for (const Step& st : plan->steps)
    if (st.node->op_type == "Identity" && st.node->domain.empty() && st.inputs.size() == 1 &&
        st.inputs[0] >= 0 && st.outputs.size() == 1 && st.outputs[0] >= 0)
      identity_of[st.outputs[0]] = &st;
  for (int s : plan->output_slots) {
    int source = s;
    for (auto it = identity_of.find(source); it != identity_of.end(); it = identity_of.find(source))
      source = it->second->inputs[0];
    plan->output_sources.push_back(source);
  }

  // Lifetimes: release each slot after its last reader, except constants, outputs and
  // outer-scope values.
  last_use.assign(plan->num_slots, -1);
  for (size_t s = 0; s < plan->steps.size(); ++s) {
    for (int i : plan->steps[s].inputs)
      if (i >= 0) last_use[i] = static_cast<int>(s);
    for (const Value* v : plan->steps[s].node->implicit_inputs) last_use[slot(v)] = static_cast<int>(s);
    for (int o : plan->steps[s].outputs)
      if (o >= 0 && last_use[o] < static_cast<int>(s)) last_use[o] = static_cast<int>(s);
  }
  last_use.resize(plan->num_slots, -1);
  std::vector<bool> pinned(plan->num_slots, false);
  for (const auto& [s, t] : plan->constants) pinned[s] = true;
  for (int s : plan->output_slots) pinned[s] = true;
  for (const auto& [n, s] : plan->outer_slots) pinned[s] = true;
  for (int s = 0; s < plan->num_slots; ++s)
    if (!pinned[s] && last_use[s] >= 0) plan->steps[last_use[s]].release_after.push_back(s);
  return plan;
}

namespace {

struct PrepareJob {
  Kernel* kernel;
  const Node* node;
  size_t constant_bytes;
};

void collect_prepare_jobs(Plan& plan, std::vector<PrepareJob>& jobs) {
  std::unordered_map<int, size_t> constant_bytes;
  for (const auto& [s, t] : plan.constants) constant_bytes[s] = t.nbytes();
  for (Step& step : plan.steps) {
    size_t bytes = 0;
    for (int i : step.inputs)
      if (auto it = constant_bytes.find(i); i >= 0 && it != constant_bytes.end()) bytes += it->second;
    if (bytes > 0 && step.kernel) jobs.push_back({step.kernel.get(), step.node, bytes});
  }
  for (auto& [g, sub] : plan.subplans) collect_prepare_jobs(*sub, jobs);
}

}  // namespace

size_t prepare_kernels(Plan& plan) {
  std::vector<PrepareJob> jobs;
  collect_prepare_jobs(plan, jobs);
  if (jobs.empty()) return 0;
  // Largest first, so that one big weight (a tied LM head) does not start last and run alone.
  std::stable_sort(jobs.begin(), jobs.end(), [](const PrepareJob& a, const PrepareJob& b) {
    return a.constant_bytes > b.constant_bytes;
  });
  std::atomic<size_t> next{0}, bytes{0};
  std::mutex mu;
  std::exception_ptr first_error;
  auto work = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      try {
        bytes += jobs[j].kernel->prepare(1);
      } catch (const std::bad_alloc&) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error)
          first_error = std::make_exception_ptr(
              Error(fmt::format("[session] {}: out of memory packing its {} bytes of weights",
                                jobs[j].node->label(), jobs[j].constant_bytes)));
        next = jobs.size();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
        next = jobs.size();
      }
    }
  };
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), jobs.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no thread to be had: this one does the rest
      break;
    }
  }
  work();
  for (std::thread& th : pool) th.join();
  if (first_error) std::rethrow_exception(first_error);
  return bytes;
}

namespace {

/// RunOptions::deadline / terminate: an onyx::Error before the next node once either fires.
void check_not_cancelled(const RunContext& rc, const Plan& plan) {
  if (rc.terminate && rc.terminate->load(std::memory_order_relaxed))
    ONYX_THROW("[run] cancelled: RunOptions::terminate was set (in graph '{}', after {} nodes)",
               plan.graph->name, rc.nodes_run);
  if (rc.deadline && std::chrono::steady_clock::now() > *rc.deadline)
    ONYX_THROW("[run] cancelled: RunOptions::deadline passed (in graph '{}', after {} nodes)",
               plan.graph->name, rc.nodes_run);
}

}  // namespace

std::vector<Datum> execute_plan(const Plan& plan, std::vector<Datum> inputs, const Frame* parent,
                                RunContext& rc) {
  Frame frame;
  frame.plan = &plan;
  frame.parent = parent;
  frame.slots.resize(plan.num_slots);
  for (const auto& [s, t] : plan.constants) frame.slots[s] = Datum(t);
  ONYX_CHECK(inputs.size() <= plan.input_slots.size(), "[graph '{}'] got {} inputs, takes {}",
             plan.graph->name, inputs.size(), plan.input_slots.size());
  // An input left empty keeps its initializer (inputs that are also initializers have defaults).
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].is_none() || frame.slots[plan.input_slots[i]].is_none())
      frame.slots[plan.input_slots[i]] = std::move(inputs[i]);
  for (const auto& [name, s] : plan.outer_slots) {
    const Datum* d = parent ? parent->lookup(name) : nullptr;
    ONYX_CHECK(d, "[graph '{}'] reads '{}' from an enclosing scope, but no value of that name exists",
               plan.graph->name, name);
    frame.slots[s] = *d;
  }
  // Main-graph outputs whose producers notify the caller (slot -> output index).
  std::vector<int> notify;
  if (rc.on_output && !parent) {
    notify.assign(static_cast<size_t>(plan.num_slots), -1);
    for (size_t i = 0; i < plan.output_slots.size(); ++i) notify[plan.output_slots[i]] = static_cast<int>(i);
  }
  // Main-graph outputs the caller gave buffers for (slot -> buffer).
  std::vector<const Tensor*> bound;
  if (rc.output_buffers && !parent) {
    bound.assign(static_cast<size_t>(plan.num_slots), nullptr);
    for (size_t i = 0; i < plan.output_slots.size(); ++i)
      if (auto it = rc.output_buffers->find(plan.graph->outputs[i]->name); it != rc.output_buffers->end())
        bound[plan.output_sources[i]] = &it->second;
  }
  check_not_cancelled(rc, plan);  // also here: a Loop over an empty body runs no step
  for (const Step& step : plan.steps) {
    check_not_cancelled(rc, plan);
    StepContext ctx(step, frame, rc, bound);
    auto t0 = std::chrono::steady_clock::now();
    try {
      check_input_devices(step, frame);
      step.kernel->compute(ctx);
    } catch (const NotImplemented&) {
      throw;
    } catch (const Error& e) {
      std::string msg = e.what();
      std::string tag = "[" + step.node->label() + "]";
      if (msg.find(tag) == std::string::npos) msg = tag + " " + msg;
      throw Error(msg);
    } catch (const std::bad_alloc&) {
      ONYX_THROW("[{}] out of memory", step.node->label());
    }
    for (size_t o = 0; o < step.outputs.size(); ++o)
      ONYX_CHECK(step.outputs[o] < 0 || !frame.slots[step.outputs[o]].is_none() ||
                     step.node->op_type == "Optional" || step.node->op_type == "If" ||
                     step.node->op_type == "Loop",
                 "[{}] produced no value for output {} ('{}')", step.node->label(), o,
                 step.node->outputs[o]->name);
    if (rc.profile) {
      auto t1 = std::chrono::steady_clock::now();
      ProfileEvent ev;
      ev.name = step.node->name.empty() ? step.node->op_type : step.node->name;
      ev.op = step.node->op_type;
      for (int i = 0; i < ctx.num_inputs(); ++i) {
        const Datum* d = ctx.input_datum(i);
        ev.input_shapes.push_back(d && d->is_tensor() ? d->tensor.shape() : Shape{});
      }
      ev.start_us = std::chrono::duration_cast<std::chrono::microseconds>(t0 - rc.epoch).count();
      ev.dur_us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
      ev.tid = static_cast<int>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000);
      rc.events.push_back(std::move(ev));
    }
    ++rc.nodes_run;
    if (!notify.empty())
      for (int s : step.outputs)
        if (s >= 0 && notify[s] >= 0 && frame.slots[s].is_tensor())
          rc.on_output(plan.graph->outputs[notify[s]]->name, frame.slots[s].tensor);
    for (int s : step.release_after) frame.slots[s] = Datum();
  }
  std::vector<Datum> outs;
  outs.reserve(plan.output_slots.size());
  for (int s : plan.output_slots) {
    Datum d = frame.slots[s];
    if (d.is_none()) {
      // A graph output that is an outer-scope value read by name.
      if (const Datum* outer = frame.lookup(plan.graph->outputs[outs.size()]->name)) d = *outer;
    }
    outs.push_back(std::move(d));
  }
  return outs;
}

std::vector<Datum> evaluate_node(const Node& node, const Model& model, const Graph& graph,
                                 const ExecutionProvider& provider, const std::vector<Datum>& inputs) {
  Plan plan;
  plan.graph = &graph;
  Step step;
  step.node = &node;
  step.kernel = create_kernel(node, model, graph, provider);
  plan.providers = {&provider};
  for (size_t i = 0; i < inputs.size(); ++i) step.inputs.push_back(inputs[i].is_none() && !node.has_input(static_cast<int>(i)) ? -1 : static_cast<int>(i));
  for (size_t o = 0; o < node.outputs.size(); ++o)
    step.outputs.push_back(node.outputs[o] ? static_cast<int>(inputs.size() + o) : -1);
  plan.num_slots = static_cast<int>(inputs.size() + node.outputs.size());
  Frame frame;
  frame.plan = &plan;
  frame.slots.resize(plan.num_slots);
  for (size_t i = 0; i < inputs.size(); ++i) frame.slots[i] = inputs[i];
  RunContext rc;
  rc.allocator = cpu_allocator();
  rc.threads = 1;
  const std::vector<const Tensor*> unbound;
  StepContext ctx(step, frame, rc, unbound);
  step.kernel->compute(ctx);
  std::vector<Datum> outs;
  for (size_t o = 0; o < node.outputs.size(); ++o)
    outs.push_back(node.outputs[o] ? frame.slots[inputs.size() + o] : Datum());
  return outs;
}

}  // namespace onyx
