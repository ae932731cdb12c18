#include "graph/specialize.h"

#include <algorithm>

#include "graph/error.h"
#include "graph/shape_inference.h"

namespace onyx {
namespace {

bool is_graph_input(const Graph& g, const Value* v) {
  return std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end();
}

SymShape fixed_shape(const Shape& s) {
  SymShape r;
  for (int64_t d : s) r.push_back(Dim::fixed(d));
  return r;
}

/// `s` with every symbol that `dims` binds replaced by its size.
SymShape substitute(const SymShape& s, const std::map<std::string, int64_t>& dims) {
  SymShape r = s;
  for (Dim& d : r)
    if (!d.is_fixed() && !d.param.empty())
      if (auto it = dims.find(d.param); it != dims.end()) d = Dim::fixed(it->second);
  return r;
}

}  // namespace

std::map<std::string, int64_t> bind_input_dims(const Graph& g, const std::map<std::string, Shape>& shapes,
                                               bool resize_fixed) {
  std::map<std::string, int64_t> dims;
  for (const auto& [name, shape] : shapes) {
    const Value* v = g.find_value(name);
    ONYX_CHECK(v && is_graph_input(g, v) && !g.is_initializer(v),
               "[specialize] '{}' is not an input of graph '{}'", name, g.name);
    if (!v->type.is_tensor() || !v->type.shape) continue;  // nothing declared to match
    const SymShape& decl = *v->type.shape;
    ONYX_CHECK(decl.size() == shape.size(), "[specialize] input '{}' is declared {} (rank {}), "
               "the given shape {} has rank {}", name, sym_shape_str(decl), decl.size(),
               shape_str(shape), shape.size());
    for (size_t i = 0; i < decl.size(); ++i) {
      const Dim& d = decl[i];
      if (d.is_fixed()) {
        ONYX_CHECK(resize_fixed || d.value == shape[i], "[specialize] input '{}' is declared {}, "
                   "so dim {} must be {}, but the given shape is {}", name, sym_shape_str(decl), i,
                   d.value, shape_str(shape));
        continue;
      }
      if (d.param.empty()) continue;
      auto [it, fresh] = dims.emplace(d.param, shape[i]);
      ONYX_CHECK(fresh || it->second == shape[i], "[specialize] symbolic dim '{}' is {} in one "
                 "input and {} in input '{}' ({})", d.param, it->second, shape[i], name,
                 shape_str(shape));
    }
  }
  return dims;
}

void specialize_input_shapes(Model& model, const std::map<std::string, Shape>& shapes,
                             bool resize_fixed) {
  Graph& g = *model.graph;
  const std::map<std::string, int64_t> dims = bind_input_dims(g, shapes, resize_fixed);
  for (Value* in : g.inputs) {
    if (g.is_initializer(in) || !in->type.is_tensor()) continue;
    auto it = shapes.find(in->name);
    if (it != shapes.end()) in->type.shape = fixed_shape(it->second);
    else if (in->type.shape) in->type.shape = substitute(*in->type.shape, dims);
  }
  // Forget every produced shape, infer again from the new inputs, and fall back to the
  // declared one (made safe for the new sizes) where inference cannot tell.
  std::map<Value*, SymShape> declared;
  for (const auto& node : g.nodes())
    for (Value* o : node->outputs) {
      if (!o || !o->type.is_tensor()) continue;
      if (o->type.shape) declared[o] = *o->type.shape;
      o->type.shape.reset();
    }
  infer_types_and_shapes(model);
  for (auto& [v, decl] : declared) {
    if (!v->type.is_tensor()) continue;
    SymShape safe = resize_fixed ? SymShape(decl.size()) : substitute(decl, dims);
    if (!v->type.shape) {
      v->type.shape = safe;
      continue;
    }
    // Inference may know fewer dims than the declaration did (it keeps unknown dims unknown).
    SymShape& got = *v->type.shape;
    if (got.size() != safe.size()) continue;
    for (size_t i = 0; i < got.size(); ++i)
      if (!got[i].is_fixed() && safe[i].is_fixed()) got[i] = safe[i];
  }
}

std::map<std::string, Shape> input_shapes_with_batch(const Graph& g, int64_t batch,
                                                     std::map<std::string, int64_t> dims,
                                                     int64_t default_dim) {
  ONYX_CHECK(batch >= 1, "[specialize] the batch should be >= 1 but is {}", batch);
  std::vector<const Value*> inputs;
  for (const Value* in : g.inputs) {
    if (g.is_initializer(in) || !in->type.is_tensor()) continue;
    ONYX_CHECK(in->type.shape.has_value(), "[specialize] input '{}' declares no shape, so its "
               "batch dim is unknown", in->name);
    inputs.push_back(in);
    // A symbol naming some input's dim 0 is the batch wherever it appears.
    if (!in->type.shape->empty() && !in->type.shape->front().param.empty())
      dims[in->type.shape->front().param] = batch;
  }
  std::map<std::string, Shape> shapes;
  for (const Value* in : inputs) {
    Shape s;
    for (size_t i = 0; i < in->type.shape->size(); ++i) {
      const Dim& d = (*in->type.shape)[i];
      if (i == 0) s.push_back(batch);
      else if (d.is_fixed()) s.push_back(d.value);
      else if (auto it = dims.find(d.param); !d.param.empty() && it != dims.end()) s.push_back(it->second);
      else s.push_back(default_dim);
    }
    shapes[in->name] = s;
  }
  return shapes;
}

}  // namespace onyx
