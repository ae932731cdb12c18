// Loading a model without copying its weights twice.
//
// protobuf copies every `bytes` field into a std::string of its own, so parsing a 435 MB BERT
// file allocated (and page-faulted) another 435 MB, which tensor_from_proto then copied again
// into the tensors: 560 K page faults and 1.5 s before the first node ran. Instead, the model's
// bytes are scanned at the wire level first: the raw_data of the main graph's large initializers
// is cut out (the rest is copied into a compact buffer that protobuf parses as usual), and each
// initializer's tensor is then filled straight from where its bytes lie in the file's mapping.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onyx {

/// A ModelProto whose main-graph initializers' raw_data (the large ones) were cut out.
struct StrippedModel {
  std::string compact;  // the model's bytes without those raw_data fields
  /// For each initializer of the main graph, in order: the raw_data it had (a view into the
  /// original bytes), or nullopt when it kept its data in `compact` (small, typed fields,
  /// external data).
  std::vector<std::optional<std::string_view>> raw;
};

/// Cuts out the raw_data of the main graph's initializers of at least `min_bytes`. nullopt when
/// the bytes are not a well-formed ModelProto at the wire level (or use the deprecated group
/// encoding, or carry the graph twice): the caller parses them as they are, and protobuf names
/// the problem.
std::optional<StrippedModel> strip_initializer_raw_data(std::string_view model,
                                                        size_t min_bytes = 4096);

}  // namespace onyx
