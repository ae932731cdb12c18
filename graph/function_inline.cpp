#include "graph/function_inline.h"

#include <map>
#include <string>
#include <unordered_map>

#include <google/protobuf/unknown_field_set.h>

#include "graph/error.h"

namespace onyx {
namespace {

using FunctionMap = std::map<std::pair<std::string, std::string>, const onnx::FunctionProto*>;

std::string dom(const std::string& d) { return d == "ai.onnx" ? "" : d; }

class Inliner {
 public:
  explicit Inliner(const FunctionMap& fns) : fns_(fns) {}

  void inline_graph(onnx::GraphProto* g, int depth = 0) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    for (auto& node : *g->mutable_node()) expand(node, &out, depth);
    g->mutable_node()->Swap(&out);
  }

 private:
  // Appends `node` to `out`, or the inlined body when it calls a local function.
  void expand(onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>* out,
              int depth) {
    ONYX_CHECK(depth < 64, "[functions] nesting deeper than 64 at node '{}' ({}): recursive function?",
               node.name(), node.op_type());
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) inline_graph(a.mutable_g(), depth);
      for (auto& sg : *a.mutable_graphs()) inline_graph(&sg, depth);
    }
    auto it = fns_.find({dom(node.domain()), node.op_type()});
    if (it == fns_.end()) {
      *out->Add() = node;
      return;
    }
    const onnx::FunctionProto& fn = *it->second;
    std::string prefix = fmt::format("{}__{}_{}__", fn.name(), node.name(), counter_++);
    std::unordered_map<std::string, std::string> rename;
    for (int i = 0; i < fn.input_size(); ++i)
      rename[fn.input(i)] = i < node.input_size() ? node.input(i) : "";
    for (int i = 0; i < fn.output_size(); ++i)
      rename[fn.output(i)] = i < node.output_size() ? node.output(i) : prefix + fn.output(i);
    std::map<std::string, const onnx::AttributeProto*> caller_attrs;
    for (const auto& a : node.attribute()) caller_attrs[a.name()] = &a;
    std::map<std::string, const onnx::AttributeProto*> defaults;
    for (const auto& a : default_attributes(fn)) defaults[a.name()] = &a;

    auto map_name = [&](const std::string& n) -> std::string {
      if (n.empty()) return n;
      auto r = rename.find(n);
      if (r != rename.end()) return r->second;
      return rename[n] = prefix + n;
    };
    google::protobuf::RepeatedPtrField<onnx::NodeProto> body;
    for (const auto& fnode : fn.node()) {
      onnx::NodeProto copy = fnode;
      for (auto& in : *copy.mutable_input()) in = map_name(in);
      for (auto& o : *copy.mutable_output()) o = map_name(o);
      if (!copy.name().empty()) copy.set_name(prefix + copy.name());
      substitute_attrs(&copy, caller_attrs, defaults);
      for (auto& a : *copy.mutable_attribute()) {
        if (a.has_g()) rename_subgraph(a.mutable_g(), rename);
        for (auto& sg : *a.mutable_graphs()) rename_subgraph(&sg, rename);
      }
      *body.Add() = std::move(copy);
    }
    for (auto& b : body) expand(b, out, depth + 1);
  }

  static void substitute_attrs(onnx::NodeProto* n,
                               const std::map<std::string, const onnx::AttributeProto*>& caller,
                               const std::map<std::string, const onnx::AttributeProto*>& defaults) {
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> kept;
    for (auto& a : *n->mutable_attribute()) {
      if (a.ref_attr_name().empty()) {
        *kept.Add() = a;
        continue;
      }
      const onnx::AttributeProto* src = nullptr;
      if (auto c = caller.find(a.ref_attr_name()); c != caller.end()) src = c->second;
      else if (auto d = defaults.find(a.ref_attr_name()); d != defaults.end()) src = d->second;
      if (!src) continue;  // attribute left unset: the op's own default applies
      onnx::AttributeProto v = *src;
      v.set_name(a.name());
      *kept.Add() = std::move(v);
    }
    n->mutable_attribute()->Swap(&kept);
  }

  // Subgraphs inside a function body may read the function's values by name.
  static void rename_subgraph(onnx::GraphProto* g,
                              const std::unordered_map<std::string, std::string>& rename) {
    auto map_outer = [&](std::string* n) {
      auto r = rename.find(*n);
      if (r != rename.end()) *n = r->second;
    };
    for (auto& node : *g->mutable_node()) {
      for (auto& in : *node.mutable_input()) map_outer(&in);
      for (auto& a : *node.mutable_attribute()) {
        if (a.has_g()) rename_subgraph(a.mutable_g(), rename);
        for (auto& sg : *a.mutable_graphs()) rename_subgraph(&sg, rename);
      }
    }
    for (auto& o : *g->mutable_output()) map_outer(o.mutable_name());
  }

  // FunctionProto.attribute_proto (field 11, attribute defaults) is newer than the
  // libonnx-dev proto we compile against, so it arrives as unknown fields.
  const std::vector<onnx::AttributeProto>& default_attributes(const onnx::FunctionProto& fn) {
    auto [it, fresh] = defaults_cache_.try_emplace(&fn);
    if (fresh) {
      const auto& unknown = fn.GetReflection()->GetUnknownFields(fn);
      for (int i = 0; i < unknown.field_count(); ++i) {
        const auto& f = unknown.field(i);
        if (f.number() != 11 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
          continue;
        onnx::AttributeProto a;
        if (a.ParseFromString(f.length_delimited())) it->second.push_back(std::move(a));
      }
    }
    return it->second;
  }

  const FunctionMap& fns_;
  std::map<const onnx::FunctionProto*, std::vector<onnx::AttributeProto>> defaults_cache_;
  int counter_ = 0;
};

}  // namespace

void inline_local_functions(onnx::ModelProto& model) {
  if (model.functions_size() == 0) return;
  FunctionMap fns;
  for (const auto& f : model.functions()) fns[{dom(f.domain()), f.name()}] = &f;
  for (const auto& f : model.functions())
    for (const auto& imp : f.opset_import()) {
      bool present = false;
      for (const auto& m : model.opset_import()) present |= dom(m.domain()) == dom(imp.domain());
      if (!present) *model.add_opset_import() = imp;
    }
  Inliner(fns).inline_graph(model.mutable_graph());
  model.clear_functions();
}

}  // namespace onyx
