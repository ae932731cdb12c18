#include "inference/session.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>
#include <unordered_set>

#include "autodiff/gradient_op.h"
#include "graph/canonicalize.h"
#include "graph/mapped_file.h"
#include "graph/quantized_contrib_ops.h"
#include "graph/onnx_io.h"
#include "inference/run_allocator.h"
#include "kernels/arena.h"
#include "kernels/denormals.h"
#include "inference/executor.h"
#include "inference/optimizer.h"
#include "inference/partition.h"
#include "inference/precision.h"
#include "inference/profiler.h"

namespace onyx {

std::vector<std::string> available_providers() {
  std::vector<std::string> names;
  for (const std::string& n : built_provider_names()) {
    try {
      make_provider(n, 0);
      names.push_back(n);
    } catch (const Error&) {  // built, but no device here
    }
  }
  return names;
}

OptLevel opt_level_from_name(const std::string& name) {
  if (name == "none" || name == "0") return OptLevel::None;
  if (name == "basic" || name == "1") return OptLevel::Basic;
  if (name == "extended" || name == "2") return OptLevel::Extended;
  if (name == "all" || name == "3") return OptLevel::All;
  ONYX_THROW("[session] unknown optimization level '{}' (expected none, basic, extended or all)", name);
}

/// The per-run memory and resources (streams) of every provider. Streams are synchronized
/// and the device memory the run freed is handed back when the run ends, also when it
/// throws: no queued kernel can outlive the buffers it reads.
class RunDevices {
 public:
  RunDevices(const std::vector<std::shared_ptr<ExecutionProvider>>& providers,
             const std::shared_ptr<RunAllocator>& host, RunContext& rc)
      : providers_(providers) {
    if (providers.size() == 1) return;  // CPU alone: rc.allocator serves every step
    for (const auto& p : providers) {
      const bool on_host = p->device().type == DeviceType::CPU;
      allocs_.push_back(on_host ? host : std::make_shared<RunAllocator>(p->allocator(), true));
      resources_.push_back(p->begin_run());
      rc.provider_allocators.push_back(allocs_.back());
      rc.resources.push_back(resources_.back().get());
      // Host outputs (copies to the host) in the provider's host memory, counted with the
      // run's host bytes.
      auto pinned = p->host_allocator();
      host_allocs_.push_back(pinned ? std::make_shared<RunAllocator>(pinned) : nullptr);
      rc.provider_host_allocators.push_back(host_allocs_.back());
    }
  }
  ~RunDevices() {
    try {
      finish();
    } catch (...) {  // a run that already failed keeps its first error
    }
  }
  /// Host memory for a copy out of device `d` (page-locked where its provider has it).
  std::shared_ptr<Allocator> host_memory_for(Device d, std::shared_ptr<Allocator> fallback) const {
    for (size_t i = 0; i < host_allocs_.size(); ++i)
      if (providers_[i]->device() == d && host_allocs_[i]) return host_allocs_[i];
    return fallback;
  }
  RunResources* resources_of(Device d) const {
    for (size_t i = 0; i < resources_.size(); ++i)
      if (providers_[i]->device() == d) return resources_[i].get();
    return nullptr;
  }
  /// Waits for every stream, then returns the device blocks the run kept.
  void finish() {
    if (finished_) return;
    finished_ = true;
    for (auto& r : resources_) r->synchronize();
    for (auto& a : allocs_) a->end_run();
  }
  size_t device_peak_bytes() const {
    size_t peak = 0;
    for (size_t i = 0; i < allocs_.size(); ++i)
      if (providers_[i]->device().type != DeviceType::CPU) peak += allocs_[i]->peak_bytes();
    return peak;
  }

 private:
  const std::vector<std::shared_ptr<ExecutionProvider>>& providers_;
  std::vector<std::shared_ptr<RunAllocator>> allocs_;
  std::vector<std::unique_ptr<RunResources>> resources_;
  std::vector<std::shared_ptr<RunAllocator>> host_allocs_;
  bool finished_ = false;
};

struct Session::Impl {
  SessionOptions options;
  std::unique_ptr<Model> model;
  std::vector<std::shared_ptr<ExecutionProvider>> providers;  // priority order, CPU last
  std::shared_ptr<ExecutionProvider> cpu;
  Placement placement;
  std::unique_ptr<Plan> plan;
  std::vector<IoInfo> inputs, outputs;
  std::vector<bool> input_has_default;  // inputs that are also initializers may be left out
  ModelMetadata metadata;
  int threads = 1;
  mutable Profiler profiler;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  // The storage of every constant of the plan and its subgraphs' plans: an output that is a
  // view of one is copied before the caller gets it (unshare_outputs).
  std::unordered_set<const Storage*> constant_storage;
  // The external data files some of those constants live in (LoadOptions::map_external_data):
  // each run first checks that none was truncated or rewritten under its mapping.
  std::vector<std::shared_ptr<const MappedFile>> mapped_files;

  void collect_constant_storage(const Plan& p) {
    for (const auto& [slot, t] : p.constants)
      if (t.storage()) constant_storage.insert(t.storage().get());
    for (const auto& [g, sub] : p.subplans) collect_constant_storage(*sub);
  }

  /// Outputs that share memory with a constant (an Identity of a weight, one row Gathered
  /// from it, a Reshape of it) become copies: the caller may write into what run() returns,
  /// and that must not change the model's weights for the next run. Views of a feed stay
  /// views (the caller owns both; the Python and torch doors promise zero copies).
  void unshare_outputs(NamedValues& result, const std::shared_ptr<Allocator>& alloc) const {
    auto constant = [&](const Tensor& t) {
      return t.storage() && t.device().type == DeviceType::CPU &&
             constant_storage.count(t.storage().get()) != 0;
    };
    for (auto& [name, d] : result) {
      if (d.is_tensor() && constant(d.tensor)) d.tensor = d.tensor.clone(alloc);
      for (Tensor& e : d.sequence)
        if (constant(e)) e = e.clone(alloc);
    }
  }

  void build() {
    spdlog::set_level(spdlog::level::from_str(options.log_level));
    using Clock = std::chrono::steady_clock;
    auto t = Clock::now();
    auto lap = [&t] {  // ms since the last lap, for the debug line on where creation's time goes
      const auto now = Clock::now();
      const double ms = std::chrono::duration<double, std::milli>(now - t).count();
      t = now;
      return ms;
    };
    threads = options.intra_op_threads > 0 ? options.intra_op_threads
                                           : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    Graph& g = *model->graph;
    // The declared interface, before optimization changes anything.
    for (const Value* v : g.inputs) {
      inputs.push_back({v->name, v->type});
      input_has_default.push_back(g.is_initializer(v));
    }
    for (const Value* v : g.outputs) outputs.push_back({v->name, v->type});
    metadata = {model->producer_name, model->producer_version, model->domain, model->doc_string,
                g.name, model->ir_version, model->model_version, model->opsets, model->metadata};
    // The preview-training Gradient op is defined by autodiff of the graph around it.
    autodiff::expand_gradient_ops(*model);
    canonicalize_opsets(*model);
    expand_quantized_contrib_ops(*model);
    AutocastReport amp = autocast_for_providers(*model, options.precision);
    if (options.precision != Precision::Float32)
      spdlog::info("session: {}", autocast_summary(amp, options.precision));
    const double prologue_ms = lap();
    make_providers();
    omp_set_num_threads(threads);
    const double providers_ms = lap();
    // Layout passes follow the provider that gets the convolutions: the first in the list.
    LayoutPreferences layout = providers.front()->layout_preferences();
    if (!options.winograd_convolutions) layout.winograd_channel_block = 0;
    size_t removed =
        optimize_graph(*model, options.opt_level, *cpu, *providers.front(), layout,
                       options.approximate_fusions);
    const double optimize_ms = lap();
    placement = partition_graph(*model, providers);
    plan = compile_plan(g, *model, placement);
    collect_constant_storage(*plan);
    std::vector<const void*> constant_data;
    for (const Storage* st : constant_storage) constant_data.push_back(st->data());
    mapped_files = tensor_mappings_holding(constant_data);
    const double plan_ms = lap();
    const size_t prepared = options.prepack_weights ? prepare_kernels(*plan) : 0;
    const double prepare_ms = lap();
    spdlog::debug(
        "session: built in {:.1f} ms: gradient ops, opsets and autocast {:.1f}, providers {:.1f}, "
        "optimization {:.1f}, placement and plan {:.1f}, kernels prepared {:.1f}",
        prologue_ms + providers_ms + optimize_ms + plan_ms + prepare_ms, prologue_ms,
        providers_ms, optimize_ms, plan_ms, prepare_ms);
    spdlog::info(
        "session: {} nodes ({} removed by optimization), {} initializers, {} threads, {:.1f} MB "
        "of weights packed at creation",
        g.num_nodes(), removed, g.initializers.size(), threads, prepared / 1048576.0);
  }

  /// SessionOptions::providers -> provider objects, CPU appended last when missing.
  void make_providers() {
    std::vector<std::string> names = options.providers;
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) names.push_back("cpu");
    for (size_t i = 0; i < names.size(); ++i) {
      ONYX_CHECK(std::count(names.begin(), names.end(), names[i]) == 1,
                 "[session] provider '{}' is listed twice in SessionOptions::providers", names[i]);
      providers.push_back(make_provider(names[i], options.device_id));
    }
    // The CPU is the fallback: it goes last whatever its position in the list.
    auto it = std::find_if(providers.begin(), providers.end(),
                           [](const auto& p) { return p->device().type == DeviceType::CPU; });
    cpu = *it;
    providers.erase(it);
    providers.push_back(cpu);
  }

  const ExecutionProvider* provider_for(Device d) const {
    for (const auto& p : providers)
      if (p->device() == d) return p.get();
    return nullptr;
  }

  // Checks a feed against the declared input: dtype, rank and fixed dims; binds symbols.
  void check_feed(const IoInfo& info, const Datum& d, std::map<std::string, int64_t>& symbols) const {
    const ValueType& t = info.type;
    if (t.kind == ValueType::Kind::Sequence) {
      ONYX_CHECK(d.is_sequence(), "[session] input '{}' expects a sequence", info.name);
      return;
    }
    if (t.kind == ValueType::Kind::Optional) return;
    if (t.kind != ValueType::Kind::Tensor) return;
    ONYX_CHECK(d.is_tensor(), "[session] input '{}' expects a tensor", info.name);
    const Tensor& x = d.tensor;
    ONYX_CHECK(t.elem == DataType::Undefined || x.dtype() == t.elem,
               "[session] input '{}' expects dtype {} but got {}", info.name, dtype_name(t.elem),
               dtype_name(x.dtype()));
    ONYX_CHECK(provider_for(x.device()), "[session] input '{}' is on {}, but this session's providers are {}",
               info.name, x.device().str(), fmt::join(options.providers, ", "));
    if (!t.shape) return;
    const SymShape& s = *t.shape;
    ONYX_CHECK(static_cast<size_t>(x.rank()) == s.size(),
               "[session] input '{}' expects rank {} {} but got rank {} {}", info.name, s.size(),
               sym_shape_str(s), x.rank(), shape_str(x.shape()));
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t got = x.shape()[i];
      if (s[i].is_fixed()) {
        ONYX_CHECK(got == s[i].value, "[session] input '{}' expects shape {} but got {} (dim {} must be {})",
                   info.name, sym_shape_str(s), shape_str(x.shape()), i, s[i].value);
      } else if (!s[i].param.empty()) {
        auto [it, fresh] = symbols.emplace(s[i].param, got);
        ONYX_CHECK(fresh || it->second == got,
                   "[session] input '{}' dim {} ('{}') is {}, but another input bound '{}' to {}",
                   info.name, i, s[i].param, got, s[i].param, it->second);
      }
    }
  }

  NamedValues run(const NamedValues& feeds, const std::vector<std::string>& wanted, RunStats* stats,
                  const RunOptions& ro = {}) const {
    auto t0 = std::chrono::steady_clock::now();
    for (const auto& f : mapped_files) f->check_unchanged("session");
    FlushDenormals denormals(options.flush_denormals, threads);
    std::map<std::string, int64_t> symbols;
    std::vector<Datum> ordered(inputs.size());
    for (const auto& [name, d] : feeds) {
      auto it = std::find_if(inputs.begin(), inputs.end(), [&name = name](const IoInfo& i) { return i.name == name; });
      if (it == inputs.end()) {
        std::vector<std::string> names;
        for (const auto& i : inputs) names.push_back(i.name);
        ONYX_THROW("[session] '{}' is not an input of the model (inputs: {})", name, fmt::join(names, ", "));
      }
      check_feed(*it, d, symbols);
      ordered[it - inputs.begin()] = d;
    }
    for (size_t i = 0; i < inputs.size(); ++i)
      ONYX_CHECK(feeds.count(inputs[i].name) || inputs[i].type.kind == ValueType::Kind::Optional ||
                     input_has_default[i],
                 "[session] missing feed for input '{}' ({})", inputs[i].name, inputs[i].type.str());
    std::vector<size_t> out_index;
    if (wanted.empty()) {
      for (size_t i = 0; i < outputs.size(); ++i) out_index.push_back(i);
    } else {
      for (const auto& w : wanted) {
        auto it = std::find_if(outputs.begin(), outputs.end(), [&](const IoInfo& o) { return o.name == w; });
        ONYX_CHECK(it != outputs.end(), "[session] '{}' is not an output of the model", w);
        out_index.push_back(static_cast<size_t>(it - outputs.begin()));
      }
    }

    RunContext rc;
    auto run_alloc = std::make_shared<RunAllocator>(cpu->allocator());
    rc.allocator = run_alloc;
    RunDevices devices(providers, run_alloc, rc);
    rc.threads = threads;
    rc.profile = options.profiling;
    rc.epoch = created;
    rc.seed = ro.seed;
    rc.on_output = ro.on_output;
    rc.deadline = ro.deadline;
    rc.terminate = ro.terminate;
    if (!ro.output_buffers.empty()) rc.output_buffers = &ro.output_buffers;
    omp_set_num_threads(threads);  // per calling thread: oneDNN and our kernels honour it
    std::vector<Datum> outs = execute_plan(*plan, std::move(ordered), nullptr, rc);
    NamedValues result;
    for (size_t i : out_index) result[outputs[i].name] = std::move(outs[i]);
    unshare_outputs(result, run_alloc);
    // Outputs come back in host memory unless the caller keeps them on the device.
    if (!ro.outputs_on_device)
      for (auto& [name, d] : result)
        if (d.is_tensor() && d.tensor.device().type != DeviceType::CPU) {
          Tensor host = Tensor::empty(d.tensor.dtype(), d.tensor.shape(),
                                      devices.host_memory_for(d.tensor.device(), run_alloc));
          provider_for(d.tensor.device())->copy(d.tensor, host, devices.resources_of(d.tensor.device()));
          d = Datum(std::move(host));
        }
    devices.finish();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (stats) {
      *stats = RunStats{run_alloc->peak_bytes(), rc.nodes_run, ms};
      stats->device_peak_bytes = devices.device_peak_bytes();
      for (const auto& p : providers)
        if (const auto* arena = dynamic_cast<const Arena*>(p->allocator().get());
            arena && p->device().type != DeviceType::CPU) {
          stats->device_reserved_bytes += arena->reserved_bytes();
          stats->device_cached_bytes += arena->reserved_bytes() - arena->in_use_bytes();
        }
    }
    if (rc.profile)
      profiler.add_run(std::move(rc.events), run_alloc->peak_bytes(), ms,
                       std::chrono::duration_cast<std::chrono::microseconds>(t0 - created).count());
    return result;
  }
};

Session::Session(const std::string& path, const SessionOptions& options)
    : Session(load_model(path), options) {}

Session::Session(std::unique_ptr<Model> model, const SessionOptions& options) : impl_(std::make_unique<Impl>()) {
  ONYX_CHECK(model && model->graph, "[session] no model given");
  impl_->options = options;
  impl_->model = std::move(model);
  impl_->build();
}

Session Session::from_bytes(const void* data, size_t size, const SessionOptions& options,
                            const std::string& base_dir) {
  return Session(load_model_from_bytes(data, size, base_dir), options);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

NamedTensors Session::run(const NamedTensors& feeds, const std::vector<std::string>& outputs,
                          RunStats* stats) const {
  return run(feeds, outputs, RunOptions{}, stats);
}

NamedTensors Session::run(const NamedTensors& feeds, const std::vector<std::string>& outputs,
                          const RunOptions& run_options, RunStats* stats) const {
  NamedValues in;
  for (const auto& [n, t] : feeds) in.emplace(n, Datum(t));
  NamedValues out = impl_->run(in, outputs, stats, run_options);
  NamedTensors result;
  for (auto& [n, d] : out) {
    ONYX_CHECK(d.is_tensor(), "[session] output '{}' is not a tensor; use run_values()", n);
    result.emplace(n, std::move(d.tensor));
  }
  return result;
}

NamedValues Session::run_values(const NamedValues& feeds, const std::vector<std::string>& outputs,
                                RunStats* stats) const {
  return impl_->run(feeds, outputs, stats);
}

NamedValues Session::run_values(const NamedValues& feeds, const std::vector<std::string>& outputs,
                                const RunOptions& run_options, RunStats* stats) const {
  return impl_->run(feeds, outputs, stats, run_options);
}

const std::vector<IoInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<IoInfo>& Session::outputs() const { return impl_->outputs; }
const ModelMetadata& Session::metadata() const { return impl_->metadata; }
const Model& Session::model() const { return *impl_->model; }
const SessionOptions& Session::options() const { return impl_->options; }

std::vector<NodePlacement> Session::placement() const {
  std::vector<NodePlacement> out;
  const Placement& p = impl_->placement;
  for (const Node* n : impl_->model->graph->topological_order())
    out.push_back({n->label(), n->op_type, n->domain, p.provider(n).name(), p.fallback.count(n) > 0});
  return out;
}

std::string Session::end_profiling() const {
  impl_->profiler.write(impl_->options.profile_path);
  return impl_->options.profile_path;
}

}  // namespace onyx
