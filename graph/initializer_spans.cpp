#include "graph/initializer_spans.h"

#include <cstdint>

namespace onyx {
namespace {

// Field numbers of onnx.proto: ModelProto.graph, GraphProto.initializer, TensorProto.raw_data.
constexpr uint64_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

/// Reads protobuf wire fields from a byte range, checking every length against the range.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  struct Field {
    uint64_t number = 0;
    uint32_t wire_type = 0;
    std::string_view whole;    // tag to end of the value
    std::string_view payload;  // a length-delimited field's bytes
  };

  bool done() const { return p_ == end_; }

  /// The next field; false (and the reader unusable) on malformed or unsupported input.
  bool next(Field& f) {
    const char* start = p_;
    uint64_t tag = 0;
    if (!varint(tag)) return false;
    f.number = tag >> 3;
    f.wire_type = static_cast<uint32_t>(tag & 7);
    if (f.number == 0) return false;
    switch (f.wire_type) {
      case kVarint: {
        uint64_t ignored;
        if (!varint(ignored)) return false;
        break;
      }
      case kFixed64:
        if (end_ - p_ < 8) return false;
        p_ += 8;
        break;
      case kFixed32:
        if (end_ - p_ < 4) return false;
        p_ += 4;
        break;
      case kLengthDelimited: {
        uint64_t len = 0;
        if (!varint(len) || len > static_cast<uint64_t>(end_ - p_)) return false;
        f.payload = std::string_view(p_, static_cast<size_t>(len));
        p_ += len;
        break;
      }
      default: return false;  // groups (3, 4) are deprecated; 6 and 7 are invalid
    }
    f.whole = std::string_view(start, static_cast<size_t>(p_ - start));
    return true;
  }

 private:
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const auto b = static_cast<uint8_t>(*p_++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  const char* p_;
  const char* end_;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_length_delimited(std::string& out, uint64_t number, std::string_view payload) {
  put_varint(out, (number << 3) | kLengthDelimited);
  put_varint(out, payload.size());
  out.append(payload);
}

/// A TensorProto without its raw_data fields, and the raw_data it had (protobuf keeps the last
/// of repeated occurrences of a singular field), when that is at least `min_bytes`.
bool strip_tensor(std::string_view tensor, size_t min_bytes, std::string& out,
                  std::optional<std::string_view>& raw) {
  WireReader r(tensor);
  WireReader::Field f;
  std::optional<std::string_view> last;
  while (!r.done()) {
    if (!r.next(f)) return false;
    if (f.number == kTensorRawData && f.wire_type == kLengthDelimited) last = f.payload;
  }
  if (!last || last->size() < min_bytes) {
    out.append(tensor);
    raw.reset();
    return true;
  }
  WireReader again(tensor);
  while (!again.done()) {
    again.next(f);
    if (!(f.number == kTensorRawData && f.wire_type == kLengthDelimited)) out.append(f.whole);
  }
  raw = last;
  return true;
}

bool strip_graph(std::string_view graph, size_t min_bytes, std::string& out,
                 std::vector<std::optional<std::string_view>>& raw) {
  WireReader r(graph);
  WireReader::Field f;
  std::string tensor;
  while (!r.done()) {
    if (!r.next(f)) return false;
    if (f.number != kGraphInitializer || f.wire_type != kLengthDelimited) {
      out.append(f.whole);
      continue;
    }
    tensor.clear();
    raw.emplace_back();
    if (!strip_tensor(f.payload, min_bytes, tensor, raw.back())) return false;
    put_length_delimited(out, kGraphInitializer, tensor);
  }
  return true;
}

}  // namespace

std::optional<StrippedModel> strip_initializer_raw_data(std::string_view model, size_t min_bytes) {
  StrippedModel s;
  WireReader r(model);
  WireReader::Field f;
  bool seen_graph = false;
  std::string graph;
  while (!r.done()) {
    if (!r.next(f)) return std::nullopt;
    if (f.number != kModelGraph || f.wire_type != kLengthDelimited) {
      s.compact.append(f.whole);
      continue;
    }
    // A second graph field would be merged into the first by protobuf: leave that to it.
    if (seen_graph) return std::nullopt;
    seen_graph = true;
    graph.reserve(f.payload.size() < (64u << 20) ? f.payload.size() : (64u << 20));
    if (!strip_graph(f.payload, min_bytes, graph, s.raw)) return std::nullopt;
    put_length_delimited(s.compact, kModelGraph, graph);
  }
  return s;
}

}  // namespace onyx
