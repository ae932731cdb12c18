// ONNX operator schemas (generated table): which ops exist in which opset, their arity
// and type constraints. Used to validate models and infer value types.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace onyx {

struct FormalParam {
  char option = 'S';        // 'S' single, 'O' optional, 'V' variadic
  bool homogeneous = true;  // variadic: all of one type
  std::string type_str;     // a constraint name ("T") or a literal type ("tensor(int64)")
};

struct OpSchema {
  std::string name, domain;
  int since_version = 0;
  bool deprecated = false;
  int min_inputs = 0, max_inputs = 0, min_outputs = 0, max_outputs = 0;
  std::vector<FormalParam> inputs, outputs;
  /// Constraint name -> allowed type strings ("tensor(float)", "seq(tensor(int64))", ...).
  std::map<std::string, std::vector<std::string>> constraints;

  /// The formal parameter describing actual input/output `i` (variadic tails repeat).
  const FormalParam* input_param(int i) const;
  const FormalParam* output_param(int i) const;
};

/// The schema version in force for `op` in `domain` at `opset`, or nullptr if the op does
/// not exist there yet (or the domain is unknown).
const OpSchema* find_schema(const std::string& op, const std::string& domain, int64_t opset);
/// True when onyx has schemas for `domain` at all.
bool schema_domain_known(const std::string& domain);
/// The first opset version defining `op` in `domain`, or 0 if none.
int first_opset_of(const std::string& op, const std::string& domain);
/// Every since_version of `op` in `domain`, ascending.
std::vector<int> schema_versions(const std::string& op, const std::string& domain);

}  // namespace onyx
