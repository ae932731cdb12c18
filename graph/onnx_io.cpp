#include "graph/onnx_io.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>
#include <fstream>
#include <sstream>

#include "graph/function_inline.h"
#include "graph/initializer_spans.h"
#include "graph/mapped_file.h"
#include "graph/tensor_proto.h"
#include "graph/validate.h"

namespace onyx {
namespace fs = std::filesystem;

namespace {

// IR 14 (onnx 1.23's helper.make_model writes it whatever the opset) only adds the FLOAT6 element
// types, which tensor_from_proto refuses by name like any type onyx lacks.
constexpr int64_t kMinIrVersion = 3, kMaxIrVersion = 14, kMaxOnnxOpset = 28, kMaxMlOpset = 5;

std::string read_file(const std::string& path, const char* what) {
  MappedFile f(path, what);
  return std::string(f.bytes());
}

/// Runs the weights' copies (checked and allocated already, pages not yet mapped) on up to one
/// thread per core, each populating its part of the destinations before copying into it: the
/// copy and mapping every page of the destination dominate a large model's load (BERT-base's
/// 434 MB: ~40 ms less than faulting page by page; bench/README.md, "Pages populated").
void copy_in_parallel(std::vector<PendingCopy>& copies) {
  size_t total = 0;
  for (const PendingCopy& c : copies) total += c.bytes;
  const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()),
                                          total / (size_t(32) << 20) + 1);
  if (threads <= 1) {
    for (PendingCopy& c : copies) {
      populate_pages(c.to.raw(), c.bytes);
      std::memcpy(c.to.raw(), c.from, c.bytes);
    }
    return;
  }
  // Thread t copies bytes [t * total / threads, (t + 1) * total / threads) of the
  // concatenated copies, so every thread gets the same amount whatever the tensor sizes.
  auto part = [&copies, total, threads](size_t t) {
    const size_t lo = total * t / threads, hi = total * (t + 1) / threads;
    size_t at = 0;
    for (PendingCopy& c : copies) {
      const size_t b = std::max(lo, at), e = std::min(hi, at + c.bytes);
      if (b < e) {
        char* to = static_cast<char*>(c.to.raw()) + (b - at);
        populate_pages(to, e - b);
        std::memcpy(to, static_cast<const char*>(c.from) + (b - at), e - b);
      }
      at += c.bytes;
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(part, t);
    } catch (const std::system_error&) {  // no thread to be had: copy that part here
      part(t);
    }
  }
  part(0);
  for (std::thread& th : pool) th.join();
}

class GraphBuilder {
 public:
  /// `main_raw`: the raw_data cut out of the main graph's initializers (one entry per
  /// initializer, or empty when nothing was cut).
  GraphBuilder(std::string base_dir, const std::vector<std::optional<std::string_view>>* main_raw,
               bool map_external_data)
      : base_dir_(std::move(base_dir)), main_raw_(main_raw), map_external_data_(map_external_data) {}

  std::unique_ptr<Graph> build(const onnx::GraphProto& gp, Graph* parent) {
    auto g = std::make_unique<Graph>(gp.name(), parent);
    g->doc_string = gp.doc_string();
    const bool main = parent == nullptr && main_raw_ && !main_raw_->empty();
    ONYX_CHECK(!main || main_raw_->size() == static_cast<size_t>(gp.initializer_size()),
               "[load] internal error: {} initializers scanned, {} parsed", main_raw_->size(),
               gp.initializer_size());
    {
      DeferredCopies deferred;  // external files stay mapped until their copies are done
      deferred.map_in_place = map_external_data_;
      for (int i = 0; i < gp.initializer_size(); ++i) {
        const auto& init = gp.initializer(i);
        g->add_initializer(init.name(),
                           tensor_from_proto(init, base_dir_, fmt::format("initializer '{}'", init.name()),
                                             main ? (*main_raw_)[i] : std::nullopt, &deferred));
      }
      copy_in_parallel(deferred.copies);
    }
    ONYX_CHECK(gp.sparse_initializer_size() == 0,
               "[load] graph '{}' has sparse initializers, which onyx does not support yet", gp.name());
    for (const auto& in : gp.input()) {
      Value* v = g->get_or_add_value(in.name());
      if (g->initializers.count(in.name())) {
        g->overridable_initializers.push_back(in.name());
        continue;
      }
      v->type = value_type_from_proto(in.type());
      g->inputs.push_back(v);
    }
    for (const auto& vi : gp.value_info()) {
      Value* v = g->get_or_add_value(vi.name());
      if (v->type.kind == ValueType::Kind::Unknown) v->type = value_type_from_proto(vi.type());
    }
    for (const auto& np : gp.node()) add_node(*g, np);
    for (const auto& out : gp.output()) {
      Value* v = g->get_or_add_value(out.name());
      ValueType declared = value_type_from_proto(out.type());
      if (declared.kind != ValueType::Kind::Unknown) v->type = declared;
      g->outputs.push_back(v);
    }
    return g;
  }

 private:
  void add_node(Graph& g, const onnx::NodeProto& np) {
    std::vector<Value*> ins, outs;
    for (const auto& n : np.input()) ins.push_back(n.empty() ? nullptr : g.get_or_add_value(n));
    for (const auto& n : np.output()) {
      Value* v = n.empty() ? nullptr : g.get_or_add_value(n);
      ONYX_CHECK(!v || !v->producer, "[load] value '{}' is produced twice (by {} and by {} node '{}')",
                 n, v ? v->producer->label() : "", np.op_type(), np.name());
      outs.push_back(v);
    }
    Node* node = g.add_node(np.op_type(), ins, outs, np.domain(), np.name());
    node->doc_string = np.doc_string();
    for (const auto& ap : np.attribute()) node->attrs[ap.name()] = attribute(ap, g, *node);
    // Record what the node's subgraphs read from this graph (or further out).
    for (const auto& [an, a] : node->attrs) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs)
        for (const auto& n : sg->outer_scope_names()) {
          Value* v = g.get_or_add_value(n);
          if (std::find(node->implicit_inputs.begin(), node->implicit_inputs.end(), v) ==
              node->implicit_inputs.end())
            g.add_implicit_input(node, v);
        }
    }
  }

  Attribute attribute(const onnx::AttributeProto& ap, Graph& g, const Node& node) {
    Attribute a;
    a.name = ap.name();
    a.ref_attr_name = ap.ref_attr_name();
    a.type = static_cast<Attribute::Type>(ap.type());
    if (a.type == Attribute::Type::Undefined) a.type = guess_type(ap);
    std::string what = fmt::format("attribute '{}' of {}", ap.name(), node.label());
    switch (a.type) {
      case Attribute::Type::Float: a.f = ap.f(); break;
      case Attribute::Type::Int: a.i = ap.i(); break;
      case Attribute::Type::String: a.s = ap.s(); break;
      case Attribute::Type::Tensor: a.t = tensor_from_proto(ap.t(), base_dir_, what); break;
      case Attribute::Type::Graph: a.g = build(ap.g(), &g); break;
      case Attribute::Type::Floats: a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
      case Attribute::Type::Ints: a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
      case Attribute::Type::Strings: a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
      case Attribute::Type::Tensors:
        for (const auto& t : ap.tensors()) a.tensors.push_back(tensor_from_proto(t, base_dir_, what));
        break;
      case Attribute::Type::Graphs:
        for (const auto& sg : ap.graphs()) a.graphs.push_back(build(sg, &g));
        break;
      case Attribute::Type::TypeProto: a.type_protos.push_back(value_type_from_proto(ap.tp())); break;
      case Attribute::Type::TypeProtos:
        for (const auto& tp : ap.type_protos()) a.type_protos.push_back(value_type_from_proto(tp));
        break;
      case Attribute::Type::SparseTensor: a.opaque = ap.sparse_tensor().SerializeAsString(); break;
      case Attribute::Type::SparseTensors: break;
      default: ONYX_THROW("[load] {} has unknown type {}", what, static_cast<int>(ap.type()));
    }
    return a;
  }

  // IR < 2 files may leave AttributeProto.type unset; infer it from the filled field.
  static Attribute::Type guess_type(const onnx::AttributeProto& ap) {
    using T = Attribute::Type;
    if (ap.has_f()) return T::Float;
    if (ap.has_i()) return T::Int;
    if (ap.has_s()) return T::String;
    if (ap.has_t()) return T::Tensor;
    if (ap.has_g()) return T::Graph;
    if (ap.floats_size()) return T::Floats;
    if (ap.ints_size()) return T::Ints;
    if (ap.strings_size()) return T::Strings;
    if (ap.tensors_size()) return T::Tensors;
    if (ap.graphs_size()) return T::Graphs;
    return T::Undefined;
  }

  std::string base_dir_;
  const std::vector<std::optional<std::string_view>>* main_raw_;
  bool map_external_data_;
};

std::unique_ptr<Model> from_proto(onnx::ModelProto& mp, const std::string& base_dir,
                                  const LoadOptions& opts, const std::string& origin,
                                  const std::vector<std::optional<std::string_view>>* main_raw) {
  ONYX_CHECK(mp.has_graph(), "[load] {} is not an ONNX model: it has no graph", origin);
  ONYX_CHECK(mp.ir_version() >= kMinIrVersion && mp.ir_version() <= kMaxIrVersion,
             "[load] {} has IR version {}; onyx reads IR versions {} to {}", origin,
             mp.ir_version(), kMinIrVersion, kMaxIrVersion);
  auto model = std::make_unique<Model>();
  model->ir_version = mp.ir_version();
  model->producer_name = mp.producer_name();
  model->producer_version = mp.producer_version();
  model->domain = mp.domain();
  model->model_version = mp.model_version();
  model->doc_string = mp.doc_string();
  model->base_dir = base_dir;
  for (const auto& kv : mp.metadata_props()) model->metadata.emplace_back(kv.key(), kv.value());
  if (opts.inline_functions) inline_local_functions(mp);
  for (const auto& o : mp.opset_import()) {
    std::string d = canonical_domain(o.domain());
    if (d.empty())
      ONYX_CHECK(o.version() >= 1 && o.version() <= kMaxOnnxOpset,
                 "[load] {} imports ai.onnx opset {}; onyx supports opsets 1 to {}", origin,
                 o.version(), kMaxOnnxOpset);
    if (d == "ai.onnx.ml")
      ONYX_CHECK(o.version() >= 1 && o.version() <= kMaxMlOpset,
                 "[load] {} imports ai.onnx.ml opset {}; onyx supports 1 to {}", origin, o.version(),
                 kMaxMlOpset);
    model->opsets.push_back({d, o.version()});
  }
  if (mp.opset_import_size() == 0) model->opsets.push_back({"", 1});  // IR < 3 default
  model->graph =
      GraphBuilder(base_dir, main_raw, opts.map_external_data).build(mp.graph(), nullptr);
  if (opts.validate) validate_model(*model);
  return model;
}

onnx::ModelProto parse(const void* data, size_t size, const std::string& origin) {
  onnx::ModelProto mp;
  ONYX_CHECK(size > 0, "[load] {} is empty", origin);
  ONYX_CHECK(size < (size_t(2) << 30),
             "[load] {} is {} bytes; a single ONNX file must stay under 2 GiB (use external data)",
             origin, size);
  ONYX_CHECK(mp.ParseFromArray(data, static_cast<int>(size)),
             "[load] {} is not a valid ONNX model: protobuf parsing failed (truncated or not an "
             "ONNX file)",
             origin);
  return mp;
}

/// Parses `bytes` with the large initializers' raw_data cut out first (initializer_spans.h),
/// so each weight is copied once, from `bytes` into its tensor; `bytes` must outlive the call.
std::unique_ptr<Model> load_from(std::string_view bytes, const std::string& base_dir,
                                 const LoadOptions& opts, const std::string& origin) {
  std::optional<StrippedModel> stripped = strip_initializer_raw_data(bytes);
  if (!stripped) {  // not well-formed at the wire level: protobuf names the problem
    onnx::ModelProto mp = parse(bytes.data(), bytes.size(), origin);
    return from_proto(mp, base_dir, opts, origin, nullptr);
  }
  ONYX_CHECK(!bytes.empty(), "[load] {} is empty", origin);
  onnx::ModelProto mp = parse(stripped->compact.data(), stripped->compact.size(), origin);
  std::string().swap(stripped->compact);
  return from_proto(mp, base_dir, opts, origin, &stripped->raw);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& opts) {
  ONYX_CHECK(!path.empty(), "[load] file not found: ''");
  MappedFile file(path, "load");
  std::string dir = fs::absolute(fs::path(path)).parent_path().string();
  return load_from(file.bytes(), dir, opts, fmt::format("'{}'", path));
}

std::unique_ptr<Model> load_model_from_bytes(const void* data, size_t size,
                                             const std::string& base_dir, const LoadOptions& opts) {
  return load_from(std::string_view(static_cast<const char*>(data), size), base_dir, opts,
                   "model bytes");
}

namespace {

/// Initializer bytes left out of a proto, one entry per initializer in proto order (nullopt:
/// the proto holds that one's data), as GraphBuilder's `main_raw` takes them.
using RawSpans = std::vector<std::optional<std::string_view>>;
void graph_to_proto(const Graph& g, onnx::GraphProto* gp, RawSpans* spans = nullptr);

void attribute_to_proto(const Attribute& a, onnx::AttributeProto* ap) {
  ap->set_name(a.name);
  ap->set_type(static_cast<onnx::AttributeProto::AttributeType>(a.type));
  if (!a.ref_attr_name.empty()) ap->set_ref_attr_name(a.ref_attr_name);
  switch (a.type) {
    case Attribute::Type::Float: ap->set_f(a.f); break;
    case Attribute::Type::Int: ap->set_i(a.i); break;
    case Attribute::Type::String: ap->set_s(a.s); break;
    case Attribute::Type::Tensor: tensor_to_proto(a.t, "", ap->mutable_t()); break;
    case Attribute::Type::Graph: graph_to_proto(*a.g, ap->mutable_g()); break;
    case Attribute::Type::Floats: for (float f : a.floats) ap->add_floats(f); break;
    case Attribute::Type::Ints: for (int64_t i : a.ints) ap->add_ints(i); break;
    case Attribute::Type::Strings: for (const auto& s : a.strings) ap->add_strings(s); break;
    case Attribute::Type::Tensors:
      for (const auto& t : a.tensors) tensor_to_proto(t, "", ap->add_tensors());
      break;
    case Attribute::Type::Graphs:
      for (const auto& sg : a.graphs) graph_to_proto(*sg, ap->add_graphs());
      break;
    case Attribute::Type::TypeProto:
      if (!a.type_protos.empty()) value_type_to_proto(a.type_protos[0], ap->mutable_tp());
      break;
    case Attribute::Type::TypeProtos:
      for (const auto& t : a.type_protos) value_type_to_proto(t, ap->add_type_protos());
      break;
    case Attribute::Type::SparseTensor: ap->mutable_sparse_tensor()->ParseFromString(a.opaque); break;
    default: break;
  }
}

void value_info(const Value* v, onnx::ValueInfoProto* vi) {
  vi->set_name(v->name);
  if (v->type.kind != ValueType::Kind::Unknown) value_type_to_proto(v->type, vi->mutable_type());
}

/// `spans` (the main graph only): numeric initializers go into the proto as name, type and
/// shape, their bytes into `spans`, pointing at the tensors themselves.
void graph_to_proto(const Graph& g, onnx::GraphProto* gp, RawSpans* spans) {
  gp->set_name(g.name);
  if (!g.doc_string.empty()) gp->set_doc_string(g.doc_string);
  for (const Value* v : g.inputs) value_info(v, gp->add_input());
  for (const auto& n : g.overridable_initializers)
    if (const Value* v = g.find_value(n); v && std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end())
      value_info(v, gp->add_input());
  for (const Value* v : g.outputs) value_info(v, gp->add_output());
  std::vector<std::string> names;
  for (const auto& [n, t] : g.initializers) names.push_back(n);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const Tensor& t = g.initializers.at(n);
    onnx::TensorProto* tp = gp->add_initializer();
    if (spans && t.dtype() != DataType::String && !is_sub_byte(t.dtype())) {
      tp->set_name(n);
      tp->set_data_type(static_cast<int32_t>(t.dtype()));
      for (int64_t d : t.shape()) tp->add_dims(d);
      spans->emplace_back(std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
    } else {
      tensor_to_proto(t, n, tp);
      if (spans) spans->emplace_back(std::nullopt);
    }
  }
  for (const Node* n : g.topological_order()) {
    auto* np = gp->add_node();
    np->set_op_type(n->op_type);
    if (!n->name.empty()) np->set_name(n->name);
    if (!n->domain.empty()) np->set_domain(n->domain);
    if (!n->doc_string.empty()) np->set_doc_string(n->doc_string);
    for (const Value* v : n->inputs) np->add_input(v ? v->name : "");
    for (const Value* v : n->outputs) np->add_output(v ? v->name : "");
    for (const auto& [an, a] : n->attrs) attribute_to_proto(a, np->add_attribute());
    for (const Value* v : n->outputs)
      if (v && v->type.kind != ValueType::Kind::Unknown &&
          std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end())
        value_info(v, gp->add_value_info());
  }
}

}  // namespace

namespace {

/// The model as a proto; with `spans`, the main graph's numeric initializers stay out of it
/// (graph_to_proto).
onnx::ModelProto model_to_proto(const Model& model, RawSpans* spans) {
  onnx::ModelProto mp;
  mp.set_ir_version(model.ir_version);
  if (!model.producer_name.empty()) mp.set_producer_name(model.producer_name);
  if (!model.producer_version.empty()) mp.set_producer_version(model.producer_version);
  if (!model.domain.empty()) mp.set_domain(model.domain);
  if (model.model_version) mp.set_model_version(model.model_version);
  if (!model.doc_string.empty()) mp.set_doc_string(model.doc_string);
  for (const auto& [k, v] : model.metadata) {
    auto* p = mp.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  for (const auto& o : model.opsets) {
    auto* p = mp.add_opset_import();
    p->set_domain(o.domain);
    p->set_version(o.version);
  }
  graph_to_proto(*model.graph, mp.mutable_graph(), spans);
  return mp;
}

}  // namespace

std::string serialize_model(const Model& model) {
  onnx::ModelProto mp = model_to_proto(model, nullptr);
  std::string out;
  ONYX_CHECK(mp.SerializeToString(&out), "[save] model does not fit in one protobuf (2 GiB)");
  return out;
}

void save_model(const Model& model, const std::string& path) {
  std::string bytes = serialize_model(model);
  std::ofstream f(path, std::ios::binary);
  ONYX_CHECK(f.good(), "[save] cannot write '{}'", path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ONYX_CHECK(f.good(), "[save] write to '{}' failed", path);
}

Tensor load_tensor_pb(const std::string& path) {
  std::string bytes = read_file(path, "tensor");
  onnx::TensorProto tp;
  ONYX_CHECK(tp.ParseFromString(bytes), "[tensor] '{}' is not a serialized TensorProto", path);
  return tensor_from_proto(tp, fs::absolute(path).parent_path().string(), fmt::format("'{}'", path));
}

namespace {

Datum datum_from_sequence(const onnx::SequenceProto& sp, const std::string& dir, const std::string& what);

Datum datum_from_optional(const onnx::OptionalProto& op, const std::string& dir, const std::string& what) {
  switch (op.elem_type()) {
    case onnx::OptionalProto::TENSOR: return Datum(tensor_from_proto(op.tensor_value(), dir, what));
    case onnx::OptionalProto::SEQUENCE: return datum_from_sequence(op.sequence_value(), dir, what);
    case onnx::OptionalProto::UNDEFINED: return Datum();
    default: ONYX_THROW("[tensor] {}: optional of this element kind is not supported", what);
  }
}

Datum datum_from_sequence(const onnx::SequenceProto& sp, const std::string& dir, const std::string& what) {
  ONYX_CHECK(sp.elem_type() == onnx::SequenceProto::TENSOR || sp.elem_type() == 0,
             "[tensor] {}: only sequences of tensors are supported", what);
  std::vector<Tensor> seq;
  for (const auto& t : sp.tensor_values()) seq.push_back(tensor_from_proto(t, dir, what));
  return Datum::of_sequence(std::move(seq));
}

}  // namespace

Datum load_datum_pb(const std::string& path, const std::string& kind) {
  if (kind == "tensor") return Datum(load_tensor_pb(path));
  std::string bytes = read_file(path, "tensor");
  std::string dir = fs::absolute(path).parent_path().string();
  std::string what = fmt::format("'{}'", path);
  if (kind == "sequence") {
    onnx::SequenceProto sp;
    ONYX_CHECK(sp.ParseFromString(bytes), "[tensor] {} is not a serialized SequenceProto", what);
    return datum_from_sequence(sp, dir, what);
  }
  ONYX_CHECK(kind == "optional", "[tensor] unknown .pb kind '{}'", kind);
  onnx::OptionalProto op;
  ONYX_CHECK(op.ParseFromString(bytes), "[tensor] {} is not a serialized OptionalProto", what);
  return datum_from_optional(op, dir, what);
}

std::string serialize_tensor(const Tensor& t, const std::string& name) {
  onnx::TensorProto tp;
  tensor_to_proto(t, name, &tp);
  return tp.SerializeAsString();
}

std::unique_ptr<Model> clone_model(const Model& model) {
  // The structure goes through a proto, the weights around it: each is copied once, straight
  // from the original tensor (on all cores). Serializing them too held two more copies at the
  // peak (the proto's and the serialized string's): 228 MB for BERT-small's 114 MB, and a
  // TrainingSession clones its model several times while it is built.
  RawSpans spans;
  onnx::ModelProto mp = model_to_proto(model, &spans);
  LoadOptions opts;
  opts.validate = false;
  auto copy = from_proto(mp, model.base_dir, opts, "a copy of a model", &spans);
  copy->base_dir = model.base_dir;
  return copy;
}

}  // namespace onyx
