// The support matrix: every op type this build has a kernel or a gradient rule for, with its
// opsets, providers, dtypes and whether training can differentiate it. Built from the
// providers' kernel registries and autodiff's rule table, never from a hand-written list.
// It lives in inference/, which already sees kernels/ (registries, providers) and autodiff/
// (for the Gradient op), so both the CLI (`onyx ops`) and the Python package can ask it.
#pragma once

#include <climits>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace onyx {

/// An inclusive opset range; `until` is INT_MAX when open ("13+").
struct OpsetRange {
  int since = 1;
  int until = INT_MAX;
  bool operator==(const OpsetRange&) const = default;
};

/// One row of the matrix: one op type in one domain.
struct OpSupport {
  std::string domain;  // canonical: "" is ai.onnx
  std::string op_type;
  std::vector<OpsetRange> opsets;      // kernels' ranges merged, ascending; empty: no kernel
  std::vector<std::string> providers;  // those with a kernel, in the registries' order
  std::vector<DataType> dtypes;        // union of the kernels' dtype constraints (dtype_order)
  bool any_dtype = false;              // a kernel takes every dtype (no constraint)
  bool gradient = false;               // trainable: a gradient rule, or a rewrite into ruled ops
};

/// The matrix over `registries` (in provider priority order) and the ai.onnx op types with
/// a gradient rule: one row per (domain, op type), ai.onnx first, then by domain and op type.
std::vector<OpSupport> build_op_support(const std::vector<const KernelRegistry*>& registries,
                                        const std::vector<std::string>& gradient_op_types);

/// This build's matrix: every available provider's kernels, autodiff::gradient_rules() and
/// autodiff::rewritten_op_types().
/// With `provider` set, only that provider's kernels count and ops without one are left out;
/// onyx::Error naming the known providers when the build has no such provider.
std::vector<OpSupport> op_support(const std::string& provider = "");

/// "ai.onnx" for the default domain, the domain otherwise.
std::string domain_display_name(const std::string& domain);
/// "1-12, 14+": ranges joined by ", ", an open upper bound as "+"; "-" when empty.
std::string opsets_str(const std::vector<OpsetRange>& opsets);
/// dtype_name of each dtype joined by ", "; "any" when any_dtype; "-" when none.
std::string dtypes_str(const OpSupport& row);
/// Readable dtype order: float types, float8/float4, signed, unsigned, bool, string, complex.
bool dtype_order(DataType a, DataType b);

}  // namespace onyx
