#include "training/without_defaults.h"

#include <algorithm>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace onyx {

std::unique_ptr<Model> without_defaults(const Model& m, const std::set<std::string>& fed) {
  auto c = clone_model(m);
  Graph& g = *c->graph;
  for (const auto& n : fed) {
    Value* v = g.find_value(n);
    ONYX_CHECK(v && g.initializers.count(n), "[training] '{}' is not an initializer", n);
    const Tensor& t = g.initializers.at(n);
    SymShape s;
    for (int64_t d : t.shape()) s.push_back(Dim::fixed(d));
    v->type = ValueType::tensor(t.dtype(), s);
    g.initializers.erase(n);
    if (std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end()) g.inputs.push_back(v);
  }
  auto& o = g.overridable_initializers;
  o.erase(std::remove_if(o.begin(), o.end(), [&](const std::string& n) { return fed.count(n) > 0; }), o.end());
  return c;
}

}  // namespace onyx
