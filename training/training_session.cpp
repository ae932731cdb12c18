#include "training/training_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "autodiff/training_graph.h"
#include "graph/error.h"
#include "graph/onnx_io.h"
#include "inference/precision.h"
#include "optimizers/denormals_as_zero.h"
#include "optimizers/flat_buffer.h"
#include "optimizers/grad_accumulate.h"
#include "optimizers/grad_clip.h"
#include "training/checkpoint.h"
#include "training/low_precision_weights.h"
#include "training/without_defaults.h"

namespace onyx {

namespace {

/// splitmix64: a well-mixed per-step seed from the session seed and the micro-batch index.
uint64_t mix_seed(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

nlohmann::json shape_json(const Shape& s) { return nlohmann::json(s); }

}  // namespace

struct TrainingSession::Impl {
  TrainingConfig cfg;
  std::unique_ptr<Model> forward;        // as given, for export
  std::unique_ptr<Model> amp_forward;    // bf16/fp16: the forward after autocast
  std::optional<optim::LossScaler> scaler;  // fp16: dynamic loss scaling
  std::unique_ptr<Model> training_copy;  // the training graph as built
  autodiff::TrainingGraph tg;            // names (its model moved into the session)
  std::unique_ptr<Session> train, eval, predict;
  optim::FlatBuffer params, grads;      // laid out in the order backward produces gradients
  std::vector<Shape> param_shapes;      // per tg.params entry
  std::vector<size_t> flat_index;       // tg.params index -> entry of the flat buffers
  std::map<std::string, size_t> grad_param;  // gradient output name -> tg.params index
  std::unique_ptr<dist::GradientBuckets> buckets;
  int rank = 0, world = 1;
  std::map<std::string, Tensor> state;   // BatchNorm running statistics
  std::unique_ptr<optim::Optimizer> opt;
  // Mixed precision's 16-bit weights (training/low_precision_weights.h): a copy of the flat
  // parameter buffer in the precision's type, which the optimizer's update writes; the training
  // graph reads param i's from the input low_inputs[i] ("" where it has none).
  Tensor low;
  std::vector<std::string> low_inputs;
  bool low_stale = true;      // parameters changed other than by the optimizer since the last copy
  bool views_given = false;   // a writable view of the parameters went out: copy before each step
  int64_t micro = 0;                     // micro-batches applied so far
  int threads = 1;
  std::vector<std::string> batch_inputs, model_inputs;
  bool budget_pending = false;  // recompute.budget_bytes waits for the first batch's shapes

  /// Initializers fed at every run instead of kept: the parameters and running statistics,
  /// and in the training graph with a loss scaler the loss seed (the scale).
  std::set<std::string> fed_names(bool training_graph) const {
    std::set<std::string> fed(tg.params.begin(), tg.params.end());
    for (const auto& [in, upd] : tg.state_updates) fed.insert(in);
    if (training_graph && scaler) fed.insert(tg.loss_seed);
    return fed;
  }

  /// The forward graph the training, evaluation and prediction graphs are built from.
  const Model& graph_forward() const { return amp_forward ? *amp_forward : *forward; }

  /// `params` less those matching a freeze regex; onyx::Error for a regex that is invalid,
  /// matches nothing, or leaves nothing to train.
  static std::vector<std::string> frozen_out(const std::vector<std::string>& params,
                                             const std::vector<std::string>& freeze) {
    std::vector<bool> frozen(params.size(), false);
    for (const std::string& f : freeze) {
      std::regex re = compile_regex(f, "freeze");
      bool any = false;
      for (size_t i = 0; i < params.size(); ++i)
        if (std::regex_search(params[i], re)) frozen[i] = any = true;
      ONYX_CHECK(any, "[training] freeze pattern '{}' matches no trainable parameter (they are: {})",
                 f, fmt::join(params, ", "));
    }
    std::vector<std::string> kept;
    for (size_t i = 0; i < params.size(); ++i)
      if (!frozen[i]) kept.push_back(params[i]);
    ONYX_CHECK(!kept.empty(), "[training] the freeze patterns freeze every parameter ({})",
               fmt::join(params, ", "));
    return kept;
  }

  static std::regex compile_regex(const std::string& pattern, const char* what) {
    try {
      return std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ONYX_THROW("[training] {} pattern '{}' is not a valid regular expression: {}", what,
                 pattern, e.what());
    }
  }

  /// Each segment takes the first parameter group whose regex finds its name.
  void apply_param_groups(std::vector<optim::ParamSegment>& segs) const {
    std::vector<std::regex> patterns;
    for (const ParamGroup& group : cfg.param_groups) {
      patterns.push_back(compile_regex(group.match, "param group"));
      ONYX_CHECK(group.lr || group.weight_decay,
                 "[training] param group '{}' sets neither lr nor weight_decay", group.match);
      ONYX_CHECK(!group.lr || cfg.optimizer.lr > 0,
                 "[training] param group '{}' sets lr, which needs a base lr > 0", group.match);
      bool any = false;
      for (const auto& seg : segs) any = any || std::regex_search(seg.name, patterns.back());
      ONYX_CHECK(any, "[training] param group '{}' matches no trainable parameter", group.match);
    }
    for (auto& seg : segs) {
      for (size_t k = 0; k < patterns.size(); ++k) {
        if (!std::regex_search(seg.name, patterns[k])) continue;
        const ParamGroup& group = cfg.param_groups[k];
        if (group.lr) seg.lr_scale = *group.lr / cfg.optimizer.lr;
        if (group.weight_decay) {
          seg.weight_decay = *group.weight_decay;
          seg.decay = true;
        }
        break;
      }
    }
  }

  void build(std::unique_ptr<Model> fwd) {
    ONYX_CHECK(fwd && fwd->graph, "[training] no model given");
    ONYX_CHECK(cfg.accumulation_steps >= 1, "[training] accumulation_steps should be >= 1 but is {}",
               cfg.accumulation_steps);
    ONYX_CHECK(cfg.clip_norm >= 0, "[training] clip_norm should be >= 0 but is {}", cfg.clip_norm);
    threads = cfg.threads > 0 ? cfg.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    forward = std::move(fwd);
    if (cfg.precision != Precision::Float32) {
      // Autocast before autodiff: each weight's Cast has a gradient rule that casts back, so
      // gradients arrive in float32 while the products of both passes run in the low format.
      amp_forward = clone_model(*forward);
      autodiff::prepare_for_training(*amp_forward);
      AutocastReport amp = autocast_for_providers(*amp_forward, cfg.precision);
      spdlog::debug("training: {}", autocast_summary(amp, cfg.precision));
    }
    if (cfg.precision == Precision::Float16) scaler.emplace(cfg.loss_scaler);
    // A memory budget for symbolic shapes waits for the first batch to size the graph.
    autodiff::RecomputeSpec recompute = cfg.recompute;
    autodiff::check_recompute_spec(recompute);
    if (recompute.budget_bytes > 0 && recompute.input_shapes.empty() && !fixed_inputs(*forward)) {
      recompute = {};
      budget_pending = true;
    }
    // With freezing the first graph only names the parameters: recompute in the second.
    tg = autodiff::build_training_graph(graph_forward(), cfg.loss, cfg.trainable,
                                        cfg.freeze.empty() ? recompute : autodiff::RecomputeSpec{});
    if (!cfg.freeze.empty()) {
      std::vector<std::string> kept = frozen_out(tg.params, cfg.freeze);
      tg = autodiff::build_training_graph(graph_forward(), cfg.loss, kept, recompute);
    }
    training_copy = clone_model(*tg.model);
    Graph& g = *tg.model->graph;
    for (const auto& p : tg.params) {
      const Tensor& t = g.initializers.at(p);
      ONYX_CHECK(t.dtype() == DataType::Float, "[training] parameter '{}' is {}; training updates "
                 "float32 parameters", p, dtype_name(t.dtype()));
      param_shapes.push_back(t.shape());
    }
    // Flat layout in the order backward produces the gradients, so data-parallel buckets
    // are contiguous ranges that complete one after another.
    std::map<std::string, size_t> position;
    {
      auto order = g.topological_order();
      for (size_t k = 0; k < order.size(); ++k)
        for (const Value* o : order[k]->outputs)
          if (o) position[o->name] = k;
    }
    std::vector<size_t> by_production(tg.params.size());
    for (size_t i = 0; i < by_production.size(); ++i) by_production[i] = i;
    std::stable_sort(by_production.begin(), by_production.end(), [&](size_t a, size_t b) {
      return position[tg.grads[a]] < position[tg.grads[b]];
    });
    std::vector<std::pair<std::string, Shape>> entries;
    flat_index.resize(tg.params.size());
    for (size_t k = 0; k < by_production.size(); ++k) {
      entries.emplace_back(tg.params[by_production[k]], param_shapes[by_production[k]]);
      flat_index[by_production[k]] = k;
    }
    for (size_t i = 0; i < tg.grads.size(); ++i) grad_param[tg.grads[i]] = i;
    params = optim::FlatBuffer(entries);
    grads = optim::FlatBuffer(entries);
    for (size_t i = 0; i < tg.params.size(); ++i) {
      const Tensor& t = g.initializers.at(tg.params[i]);
      std::memcpy(pview(i).raw(), t.raw(), t.nbytes());
    }
    for (Model* m : {forward.get(), amp_forward.get(), training_copy.get()})
      if (m) share_parameters(*m);
    for (const auto& [in, upd] : tg.state_updates) state[in] = g.initializers.at(in).clone();
    auto segs = params.segments();
    for (size_t i = 0; i < tg.params.size(); ++i)
      segs[flat_index[i]].decay = cfg.decay_1d || param_shapes[i].size() > 1;
    apply_param_groups(segs);
    // The training graph reads the 16-bit weights from the copy the optimizer writes; the
    // segments whose weights no 16-bit op reads stay out of it.
    if (cfg.precision != Precision::Float32 && cfg.low_precision_weight_copies) {
      low_inputs = training::cast_weights_to_inputs(*tg.model, tg.params, precision_dtype(cfg.precision));
      low = Tensor::zeros(precision_dtype(cfg.precision), {params.size()});
      for (size_t i = 0; i < tg.params.size(); ++i)
        segs[flat_index[i]].low_precision_copy = !low_inputs[i].empty();
    }
    opt = optim::make_optimizer(cfg.optimizer, segs);
    if (low.defined()) opt->set_low_precision_copy(low);
    cfg.schedule.lr_at(0, cfg.optimizer.lr);  // validates the schedule now, not at step 1
    for (const Value* v : forward->graph->inputs)
      if (!forward->graph->is_initializer(v)) model_inputs.push_back(v->name);
    batch_inputs = model_inputs;
    for (const auto& l : tg.labels) batch_inputs.push_back(l);

    SessionOptions so;
    so.intra_op_threads = threads;
    train = std::make_unique<Session>(without_defaults(*tg.model, fed_names(true)),
                                      training_options(so));
    tg.model.reset();
    eval = std::make_unique<Session>(
        without_defaults(*autodiff::build_eval_graph(graph_forward(), cfg.loss, tg.params), fed_names(false)),
        so);
    auto pm = clone_model(graph_forward());
    for (const auto& p : tg.params) {
      Value* v = pm->graph->find_value(p);
      if (std::find(pm->graph->inputs.begin(), pm->graph->inputs.end(), v) == pm->graph->inputs.end())
        pm->graph->inputs.push_back(v);
      pm->graph->initializers.erase(p);
    }
    for (const auto& [in, upd] : tg.state_updates) {
      pm->graph->inputs.push_back(pm->graph->find_value(in));
      pm->graph->initializers.erase(in);
    }
    predict = std::make_unique<Session>(std::move(pm), so);
    if (cfg.communicator) start_data_parallel();
  }

  /// The training graph's session options: `base` plus the profile, which covers the training
  /// graph's runs (forward, backward, loss) and not the eval or predict graphs.
  SessionOptions training_options(SessionOptions base) const {
    base.approximate_fusions = false;  // recomputed segments must match, bit for bit
    base.winograd_convolutions = false;  // training keeps PyTorch's direct convolutions
    base.flush_denormals = cfg.flush_denormals;
    base.profiling = !cfg.profile_path.empty();
    if (base.profiling) base.profile_path = cfg.profile_path;
    return base;
  }

  /// True when every fed input of `m` has a fully fixed shape.
  static bool fixed_inputs(const Model& m) {
    const Graph& g = *m.graph;
    for (const Value* in : g.inputs) {
      if (g.is_initializer(in) || !in->type.is_tensor()) continue;
      if (!in->type.shape) return false;
      for (const Dim& d : *in->type.shape)
        if (!d.is_fixed()) return false;
    }
    return true;
  }

  /// The models kept for later graphs (eval, predict, export, the recompute plan, the training
  /// graph as built) read the parameters from the flat buffer instead of each holding a copy:
  /// 2-3 copies of every weight fewer (BERT-small: 114 MB each).
  void share_parameters(Model& m) const {
    for (size_t i = 0; i < tg.params.size(); ++i) {
      auto it = m.graph->initializers.find(tg.params[i]);
      if (it != m.graph->initializers.end() && it->second.dtype() == DataType::Float &&
          it->second.shape() == param_shapes[i])
        it->second = pview(i);
    }
  }

  /// Plans the recomputation budget for the first batch's shapes: rebuilds the training graph
  /// with it and swaps the training session. Parameters, gradients, their flat layout and the
  /// optimizer stay as they are (the rebuilt graph has the same parameters and gradients).
  void plan_budget(const NamedTensors& batch) {
    autodiff::RecomputeSpec spec = cfg.recompute;
    for (const auto& name : batch_inputs)
      if (auto it = batch.find(name); it != batch.end()) spec.input_shapes[name] = it->second.shape();
    autodiff::TrainingGraph planned = autodiff::build_training_graph(graph_forward(), cfg.loss, tg.params, spec);
    ONYX_CHECK(planned.params == tg.params && planned.grads == tg.grads && planned.loss == tg.loss &&
                   planned.loss_seed == tg.loss_seed,
               "[training] the training graph rebuilt for the recomputation budget has other "
               "parameters or gradients than the one built first");
    training_copy = clone_model(*planned.model);
    share_parameters(*training_copy);
    if (low.defined()) {
      ONYX_CHECK(training::cast_weights_to_inputs(*planned.model, tg.params, low.dtype()) == low_inputs,
                 "[training] the training graph rebuilt for the recomputation budget casts other "
                 "weights than the one built first");
    }
    SessionOptions so;
    so.intra_op_threads = threads;
    train = std::make_unique<Session>(without_defaults(*planned.model, fed_names(true)),
                                      training_options(so));
    planned.model.reset();
    tg = std::move(planned);
    budget_pending = false;
  }

  Tensor pview(size_t i) const { return params.view(flat_index[i]); }
  /// Param i's 16-bit copy (a view of `low`).
  Tensor lview(size_t i) const {
    const optim::ParamSegment& s = params.segments()[flat_index[i]];
    return Tensor(low.dtype(), param_shapes[i], low.storage(),
                  low.offset() + static_cast<size_t>(s.offset) * dtype_size(low.dtype()));
  }

  /// The training graph's 16-bit weights, refreshed from the float32 ones when these changed
  /// other than by the optimizer (which writes the copy as it updates).
  void feed_low_precision_weights(NamedTensors& f) {
    if (!low.defined()) return;
    const bool refresh = low_stale || views_given;
    for (size_t i = 0; i < low_inputs.size(); ++i) {
      if (low_inputs[i].empty()) continue;
      Tensor l = lview(i);
      if (refresh) optim::copy_to_low_precision(pview(i), l, threads);
      f[low_inputs[i]] = l;
    }
    low_stale = false;
  }
  Tensor gview(size_t i) const { return grads.view(flat_index[i]); }

  void start_data_parallel() {
    dist::Communicator& comm = *cfg.communicator;
    rank = comm.rank();
    world = comm.size();
    std::vector<Tensor*> st;
    for (auto& [n, t] : state) st.push_back(&t);
    Tensor flat = params.tensor();
    dist::synchronize_start(comm, dist::model_fingerprint(tg.params, param_shapes), flat, st);
    std::vector<dist::GradSlice> slices;
    for (const auto& s : grads.segments()) slices.push_back({s.offset, s.size});
    buckets = std::make_unique<dist::GradientBuckets>(comm, grads.tensor(), slices, cfg.buckets);
  }

  /// True on every rank when `flag` is true on any.
  bool any_rank(bool flag) const {
    Tensor t = Tensor::from_vector<int32_t>({1}, {flag ? 1 : 0});
    cfg.communicator->allreduce(t, dist::ReduceOp::Max)->wait();
    return t.data<int32_t>()[0] != 0;
  }

  /// All ranks agree whether the micro-batch succeeded and on the mean loss.
  void agree(double& loss, bool& ok) const {
    if (!cfg.communicator) return;
    Tensor t = Tensor::from_vector<double>({2}, {ok ? loss : 0.0, ok ? 0.0 : 1.0});
    cfg.communicator->allreduce(t, dist::ReduceOp::Sum)->wait();
    ok = t.data<double>()[1] == 0.0;
    loss = t.data<double>()[0] / world;
  }

  /// Batch tensors plus the current parameters and state, as session feeds.
  NamedTensors feeds(const NamedTensors& batch, bool labels) const {
    NamedTensors f;
    for (const auto& [name, t] : batch) {
      bool known = std::find(batch_inputs.begin(), batch_inputs.end(), name) != batch_inputs.end();
      ONYX_CHECK(known, "[training] the batch has '{}', which is not an input of the model; "
                 "expected: {}", name, fmt::join(batch_inputs, ", "));
      bool is_label = std::find(tg.labels.begin(), tg.labels.end(), name) != tg.labels.end();
      if (labels || !is_label) f[name] = t;
    }
    for (const auto& n : labels ? batch_inputs : model_inputs)
      ONYX_CHECK(batch.count(n), "[training] the batch lacks '{}'; expected: {}", n,
                 fmt::join(labels ? batch_inputs : model_inputs, ", "));
    for (size_t i = 0; i < tg.params.size(); ++i) f[tg.params[i]] = pview(i);
    for (const auto& [n, t] : state) f[n] = t;
    return f;
  }

  /// Outputs of predict/eval that view the live parameters or state (an Identity of a weight)
  /// become copies: the next train_step would change them under the caller, and writing into
  /// them would change the model.
  NamedTensors own(NamedTensors out) const {
    auto live = [&](const Tensor& t) {
      const Storage* st = t.storage().get();
      if (!st) return false;
      if (st == params.tensor().storage().get()) return true;
      for (const auto& [n, s] : state)
        if (s.storage().get() == st) return true;
      return false;
    };
    for (auto& [name, t] : out)
      if (live(t)) t = t.clone();
    return out;
  }

  /// Copies (first micro-batch of a group) or adds gradient i into the flat buffer.
  void take_gradient(size_t i, const Tensor& gr, bool first) {
    Tensor dst = gview(i);
    if (!first) optim::accumulate_grads(dst, gr, threads);
    else if (dst.raw() != gr.raw()) std::memcpy(dst.raw(), gr.raw(), gr.nbytes());
    // (equal pointers: the run computed it in place, RunOptions::output_buffers)
  }

  StepResult step(const NamedTensors& batch) {
    if (budget_pending) plan_budget(batch);
    // The whole step, not only the graph's runs: the update passes below read gradients and
    // optimizer moments that are mostly denormals in a language model's first steps.
    optim::DenormalsAsZero denormals(cfg.flush_denormals, threads);
    std::vector<std::string> wanted = {tg.loss};
    wanted.insert(wanted.end(), tg.grads.begin(), tg.grads.end());
    for (const auto& [in, upd] : tg.state_updates) wanted.push_back(upd);
    const bool first = micro % cfg.accumulation_steps == 0;
    const bool last = (micro + 1) % cfg.accumulation_steps == 0;
    RunOptions ro;
    ro.seed = mix_seed(cfg.seed + 0x632BE59BD9B4E019ull * static_cast<uint64_t>(rank), static_cast<uint64_t>(micro));
    // The first micro-batch of a group overwrites the flat gradient buffer whole, so the graph
    // computes each gradient straight into its place there (ResNet-18: 47 MB a step not
    // copied); one it writes elsewhere (a view, a reshaped gradient) is copied as before.
    if (first)
      for (size_t i = 0; i < tg.grads.size(); ++i) ro.output_buffers.emplace(tg.grads[i], gview(i));
    // Data parallel, last micro-batch: each gradient goes to the flat buffer the moment it is
    // computed and its bucket's allreduce starts while backward continues.
    std::vector<bool> taken(tg.grads.size(), false);
    if (buckets && last)
      ro.on_output = [&](const std::string& name, const Tensor& t) {
        auto it = grad_param.find(name);
        if (it == grad_param.end() || t.dtype() != DataType::Float || t.shape() != param_shapes[it->second]) return;
        take_gradient(it->second, t, first);
        taken[it->second] = true;
        buckets->mark_ready(flat_index[it->second]);
      };
    // One process, no accumulation, no loss scaler (the common case): each gradient is read
    // once, copied into the flat buffer while its sum of squares is taken, which both finds
    // NaN/inf and gives the global norm (instead of a check pass, a copy and a norm pass).
    const bool fused = !cfg.communicator && cfg.accumulation_steps == 1 && !scaler;
    double sum_squares = 0;
    StepResult r;
    NamedTensors out;
    bool ok = true;
    std::string why;
    try {
      RunStats stats;
      NamedTensors f = feeds(batch, true);
      feed_low_precision_weights(f);
      if (scaler) f[tg.loss_seed] = Tensor::from_vector<float>({}, {scaler->scale()});
      out = train->run(f, wanted, ro, &stats);
      r.peak_bytes = stats.peak_bytes;
      r.loss = out.at(tg.loss).to_double_vector().at(0);
      // Check everything before touching any buffer, so a failed step changes nothing. With
      // loss scaling an overflow is not an error: the scaler skips the step below.
      ONYX_CHECK(scaler || std::isfinite(r.loss), "[training] the loss is {} at step {} (micro-batch {}); no "
                 "weights were changed", r.loss, opt->steps_taken(), micro);
      for (size_t i = 0; i < tg.grads.size(); ++i) {
        const Tensor& gr = out.at(tg.grads[i]);
        ONYX_CHECK(gr.dtype() == DataType::Float && gr.shape() == param_shapes[i],
                   "[training] gradient '{}' is {} {}, expected float {}", tg.grads[i], dtype_name(gr.dtype()),
                   shape_str(gr.shape()), shape_str(param_shapes[i]));
      }
      for (size_t i = 0; i < tg.grads.size(); ++i) {
        const Tensor& gr = out.at(tg.grads[i]);
        // The fused copy writes only the gradient buffer, which the next step overwrites whole.
        double ss = 0.0;
        if (fused) {
          Tensor dst = gview(i);
          ss = optim::copy_sum_squares(dst, gr, threads);
        }
        sum_squares += ss;
        bool finite = fused ? std::isfinite(ss) : scaler || !optim::has_non_finite(gr, threads);
        ONYX_CHECK(finite, "[training] the gradient of '{}' has NaN or infinite values at step {}; no weights "
                   "were changed", tg.params[i], opt->steps_taken());
      }
    } catch (const Error& e) {
      if (!cfg.communicator) throw;
      ok = false;
      why = e.what();
    }
    if (cfg.communicator) {
      // Keep the collective sequence aligned on every rank, then decide together.
      if (buckets && last) {
        for (size_t i = 0; i < taken.size(); ++i)
          if (!taken[i] && ok) take_gradient(i, out.at(tg.grads[i]), first);
        const auto wait_start = std::chrono::steady_clock::now();
        buckets->finish();
        r.comm_wait_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - wait_start)
                             .count();
      }
      double loss = r.loss;
      agree(loss, ok);
      if (!ok) {
        // The accumulation group is dropped on every rank; weights are untouched.
        micro -= micro % cfg.accumulation_steps;
        ONYX_CHECK(!why.empty(), "[training] another rank's micro-batch failed at step {} (NaN/inf loss or "
                   "gradient, or bad input); no weights were changed", opt->steps_taken());
        throw Error(why + " (all ranks skipped this step)");
      }
      r.loss = loss;
    }
    if (!fused && (!buckets || !last))
      for (size_t i = 0; i < tg.grads.size(); ++i) take_gradient(i, out.at(tg.grads[i]), first);
    for (const auto& [in, upd] : tg.state_updates) {
      Tensor& s = state.at(in);
      std::memcpy(s.raw(), out.at(upd).raw(), s.nbytes());
    }
    ++micro;
    if (last) {
      Tensor g = grads.tensor(), p = params.tensor();
      double scale = 1.0 / (static_cast<double>(cfg.accumulation_steps) * world);
      if (scaler) {
        // Unscale, average and look for inf/NaN in one pass; every rank decides alike.
        r.loss_scale = scaler->scale();
        bool found_inf = scaler->unscale(g, scale, threads);
        if (cfg.communicator) found_inf = any_rank(found_inf);
        scaler->update(found_inf);
        if (found_inf) {
          r.skipped = true;
          return r;
        }
      } else if (scale != 1.0) {
        optim::scale_grads(g, scale, threads);
      }
      if (fused) {
        r.grad_norm = std::sqrt(sum_squares);
        optim::clip_to_norm(g, r.grad_norm, cfg.clip_norm, threads);
      } else {
        r.grad_norm = optim::clip_by_global_norm(g, cfg.clip_norm, threads);
      }
      r.lr = cfg.schedule.lr_at(opt->steps_taken(), cfg.optimizer.lr);
      opt->step(p, g, r.lr, threads);
      r.stepped = true;
    }
    return r;
  }

  size_t param_index(const std::string& name) const {
    auto it = std::find(tg.params.begin(), tg.params.end(), name);
    ONYX_CHECK(it != tg.params.end(), "[training] '{}' is not a trainable parameter; parameters: {}",
               name, fmt::join(tg.params, ", "));
    return static_cast<size_t>(it - tg.params.begin());
  }

  nlohmann::json fingerprint() const {
    nlohmann::json ps = nlohmann::json::array();
    for (size_t i = 0; i < tg.params.size(); ++i) ps.push_back({tg.params[i], shape_json(param_shapes[i])});
    return ps;
  }
};

TrainingSession::TrainingSession(const std::string& model_path, const TrainingConfig& config)
    : TrainingSession(load_model(model_path), config) {}

TrainingSession::TrainingSession(std::unique_ptr<Model> forward, const TrainingConfig& config)
    : impl_(std::make_unique<Impl>()) {
  impl_->cfg = config;
  impl_->build(std::move(forward));
}

TrainingSession::~TrainingSession() = default;
TrainingSession::TrainingSession(TrainingSession&&) noexcept = default;
TrainingSession& TrainingSession::operator=(TrainingSession&&) noexcept = default;

double TrainingSession::train_step(const NamedTensors& batch) { return impl_->step(batch).loss; }
StepResult TrainingSession::train_step_detailed(const NamedTensors& batch) { return impl_->step(batch); }

NamedTensors TrainingSession::eval_step(const NamedTensors& batch) const {
  return impl_->own(impl_->eval->run(impl_->feeds(batch, true)));
}

NamedTensors TrainingSession::predict(const NamedTensors& inputs) const {
  return impl_->own(impl_->predict->run(impl_->feeds(inputs, false)));
}

const std::vector<std::string>& TrainingSession::parameter_names() const { return impl_->tg.params; }
Tensor TrainingSession::parameter(const std::string& name) const {
  Tensor view = impl_->pview(impl_->param_index(name));
  impl_->views_given = true;  // writes through it must reach the 16-bit copy
  return view;
}
void TrainingSession::set_parameter(const std::string& name, const Tensor& value) {
  size_t i = impl_->param_index(name);
  ONYX_CHECK(value.dtype() == DataType::Float && value.shape() == impl_->param_shapes[i],
             "[training] parameter '{}' is float {}, the new value is {} {}", name,
             shape_str(impl_->param_shapes[i]), dtype_name(value.dtype()), shape_str(value.shape()));
  std::memcpy(impl_->pview(i).raw(), value.raw(), value.nbytes());
  impl_->low_stale = true;
}
Tensor TrainingSession::flat_parameters() const {
  impl_->views_given = true;
  return impl_->params.tensor();
}
Tensor TrainingSession::flat_gradients() const { return impl_->grads.tensor(); }
int64_t TrainingSession::step() const { return impl_->opt->steps_taken(); }
double TrainingSession::loss_scale() const { return impl_->scaler ? impl_->scaler->scale() : 0.0; }
std::string TrainingSession::end_profiling() const {
  ONYX_CHECK(!impl_->cfg.profile_path.empty(),
             "[training] no profile to write: TrainingConfig::profile_path is empty");
  return impl_->train->end_profiling();
}
double TrainingSession::learning_rate() const {
  return impl_->cfg.schedule.lr_at(impl_->opt->steps_taken(), impl_->cfg.optimizer.lr);
}
const std::vector<std::string>& TrainingSession::batch_inputs() const { return impl_->batch_inputs; }
const TrainingConfig& TrainingSession::config() const { return impl_->cfg; }
const Model& TrainingSession::training_model() const { return *impl_->training_copy; }
const autodiff::RecomputeReport& TrainingSession::recompute_report() const {
  return impl_->tg.recompute;
}
size_t TrainingSession::num_gradient_buckets() const {
  return impl_->buckets ? impl_->buckets->num_buckets() : 0;
}

void TrainingSession::save_checkpoint(const std::string& path) const {
  const Impl& m = *impl_;
  training::CheckpointData d;
  d.meta = {{"format", "onyx-training"},
            {"params", m.fingerprint()},
            {"optimizer", m.cfg.optimizer.name},
            {"step", m.opt->steps_taken()},
            {"micro", m.micro},
            {"seed", m.cfg.seed},
            {"accumulation_steps", m.cfg.accumulation_steps},
            {"lr", m.cfg.optimizer.lr},
            {"schedule", m.cfg.schedule.kind},
            {"precision", precision_name(m.cfg.precision)}};
  if (m.scaler) {
    d.meta["loss_scale"] = m.scaler->scale();
    d.meta["growth_tracker"] = m.scaler->growth_tracker();
  }
  for (size_t i = 0; i < m.tg.params.size(); ++i) d.tensors.emplace_back("param/" + m.tg.params[i], m.pview(i));
  for (const auto& [n, t] : m.state) d.tensors.emplace_back("state/" + n, t);
  for (auto& [n, t] : m.opt->state()) d.tensors.emplace_back("optim/" + n, t);
  // Mid-accumulation, the partial gradient sum is part of the state.
  bool partial = m.micro % m.cfg.accumulation_steps != 0;
  ONYX_CHECK(!partial || !m.cfg.communicator, "[checkpoint] under data parallelism checkpoints are taken "
             "between optimizer steps, not inside an accumulation group (micro-batch {} of {})",
             m.micro % m.cfg.accumulation_steps, m.cfg.accumulation_steps);
  if (partial) d.tensors.emplace_back("grad_accum", m.grads.tensor());
  if (!m.cfg.communicator) return training::write_checkpoint(path, d);
  // Data parallel: every rank holds the same weights; rank 0 writes once all ranks arrived,
  // then tells everyone whether it worked (nobody continues past a failed save unaware).
  dist::Communicator& comm = *m.cfg.communicator;
  comm.barrier();
  std::string why;
  if (comm.rank() == 0) {
    try {
      training::write_checkpoint(path, d);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  Tensor failed = Tensor::from_vector<int32_t>({1}, {why.empty() ? 0 : 1});
  comm.allreduce(failed, dist::ReduceOp::Max)->wait();
  if (!why.empty()) throw Error(why);
  ONYX_CHECK(failed.data<int32_t>()[0] == 0, "[checkpoint] rank 0 failed to write '{}'", path);
}

void TrainingSession::load_checkpoint(const std::string& path) {
  Impl& m = *impl_;
  training::CheckpointData d = training::read_checkpoint(path);
  ONYX_CHECK(d.meta.is_object() && d.meta.value("format", nlohmann::json()) == "onyx-training",
             "[checkpoint] '{}' is not a training checkpoint", path);
  // The header's fields are checked for type here, so a file written by another tool is an
  // onyx::Error rather than a JSON library exception further down.
  auto has = [&](const char* key, bool (nlohmann::json::*is)() const noexcept) {
    ONYX_CHECK(d.meta.contains(key) && (d.meta[key].*is)(), "[checkpoint] '{}': its header's '{}' is missing or "
               "malformed", path, key);
  };
  has("params", &nlohmann::json::is_array);
  has("optimizer", &nlohmann::json::is_string);
  has("micro", &nlohmann::json::is_number_unsigned);
  has("seed", &nlohmann::json::is_number_unsigned);
  ONYX_CHECK(d.meta.at("params") == m.fingerprint(), "[checkpoint] '{}' was written for another model: its "
             "parameters are {} but this model's are {}", path, d.meta.at("params").dump(), m.fingerprint().dump());
  ONYX_CHECK(d.meta.at("optimizer") == m.cfg.optimizer.name, "[checkpoint] '{}' holds {} optimizer state, "
             "this session uses {}", path, d.meta.at("optimizer").get<std::string>(), m.cfg.optimizer.name);
  std::map<std::string, Tensor> byname(d.tensors.begin(), d.tensors.end());
  auto take = [&](const std::string& key, Tensor dst) {
    auto it = byname.find(key);
    ONYX_CHECK(it != byname.end(), "[checkpoint] '{}' lacks '{}'", path, key);
    ONYX_CHECK(it->second.dtype() == dst.dtype() && it->second.shape() == dst.shape(),
               "[checkpoint] '{}': '{}' is {} {}, expected {} {}", path, key, dtype_name(it->second.dtype()),
               shape_str(it->second.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
    return it->second;
  };
  // Validate everything first, then commit, so a bad checkpoint leaves the session as it was.
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (size_t i = 0; i < m.tg.params.size(); ++i)
    copies.emplace_back(take("param/" + m.tg.params[i], m.pview(i)), m.pview(i));
  for (auto& [n, t] : m.state) copies.emplace_back(take("state/" + n, t), t);
  std::vector<std::pair<std::string, Tensor>> ostate;
  for (const auto& [n, t] : d.tensors)
    if (n.rfind("optim/", 0) == 0) ostate.emplace_back(n.substr(6), t);
  int64_t micro = d.meta.at("micro");
  bool partial = micro % m.cfg.accumulation_steps != 0;
  if (partial) copies.emplace_back(take("grad_accum", m.grads.tensor()), m.grads.tensor());
  // The loss scaler's state, when both the file and the session have one (a float32 or bf16
  // checkpoint continues in fp16 from the configured initial scale).
  std::optional<std::pair<float, int64_t>> scaler_state;
  if (m.scaler && d.meta.contains("loss_scale")) {
    ONYX_CHECK(d.meta["loss_scale"].is_number() && d.meta.value("growth_tracker", nlohmann::json()).is_number_integer(),
               "[checkpoint] '{}': the loss scaler state is malformed", path);
    scaler_state.emplace(d.meta["loss_scale"].get<float>(), d.meta["growth_tracker"].get<int64_t>());
    optim::LossScaler probe(m.scaler->config());
    probe.set_state(scaler_state->first, scaler_state->second);  // validates before any commit
  }
  m.opt->load_state(ostate);
  if (scaler_state) m.scaler->set_state(scaler_state->first, scaler_state->second);
  for (auto& [src, dst] : copies) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  m.low_stale = true;
  m.micro = micro;
  m.cfg.seed = d.meta.at("seed");
}

std::unique_ptr<Model> TrainingSession::inference_model() const {
  auto m = clone_model(*impl_->forward);
  for (size_t i = 0; i < impl_->tg.params.size(); ++i)
    m->graph->initializers[impl_->tg.params[i]] = impl_->pview(i).clone();
  for (const auto& [n, t] : impl_->state) m->graph->initializers[n] = t.clone();
  return m;
}

void TrainingSession::export_inference_model(const std::string& path) const {
  save_model(*inference_model(), path);
}

}  // namespace onyx
