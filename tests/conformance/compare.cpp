#include "tests/conformance/compare.h"

#include <cmath>

#include "graph/float8.h"

namespace onyx::conformance {
namespace {

std::vector<double> as_doubles(const Tensor& t) {
  if (is_float8(t.dtype())) {
    std::vector<double> out(static_cast<size_t>(t.numel()));
    const auto* p = t.data_as<uint8_t>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = float8_to_float(p[i], t.dtype());
    return out;
  }
  return t.to_double_vector();
}

}  // namespace

std::string compare_tensors(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return fmt::format("dtype {} != expected {}", dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.shape() != want.shape())
    return fmt::format("shape {} != expected {}", shape_str(got.shape()), shape_str(want.shape()));
  DataType dt = want.dtype();
  if (dt == DataType::String) {
    const auto* a = got.data<std::string>();
    const auto* b = want.data<std::string>();
    for (int64_t i = 0; i < want.numel(); ++i)
      if (a[i] != b[i]) return fmt::format("element {}: '{}' != expected '{}'", i, a[i], b[i]);
    return "";
  }
  if (dt == DataType::Complex64 || dt == DataType::Complex128) {
    if (got.nbytes() && std::memcmp(got.raw(), want.raw(), got.nbytes()) != 0) return "complex values differ";
    return "";
  }
  bool exact = !is_float(dt) && !is_float8(dt);
  if (exact && (dt == DataType::Int64 || dt == DataType::UInt64)) {
    // Compare 64-bit integers bit-exactly (doubles lose precision past 2^53).
    if (got.nbytes() && std::memcmp(got.raw(), want.raw(), got.nbytes()) != 0) {
      const auto* a = got.data_as<int64_t>();
      const auto* b = want.data_as<int64_t>();
      for (int64_t i = 0; i < want.numel(); ++i)
        if (a[i] != b[i]) return fmt::format("element {}: {} != expected {}", i, a[i], b[i]);
    }
    return "";
  }
  auto a = as_doubles(got), b = as_doubles(want);
  size_t bad = 0, first = 0;
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    bool ok;
    if (exact) ok = a[i] == b[i];
    else if (std::isnan(b[i]) || std::isnan(a[i])) ok = std::isnan(a[i]) && std::isnan(b[i]);
    else if (std::isinf(b[i]) || std::isinf(a[i])) ok = a[i] == b[i];
    else ok = std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i]);
    if (!ok) {
      if (!bad) first = i;
      ++bad;
      if (!std::isnan(a[i] - b[i])) worst = std::max(worst, std::fabs(a[i] - b[i]));
    }
  }
  if (!bad) return "";
  return fmt::format("{} of {} elements differ; first at {}: {} vs expected {}; max abs diff {:.3g}", bad,
                     b.size(), first, a[first], b[first], worst);
}

std::string compare_values(const Datum& got, const Datum& want, double rtol, double atol) {
  if (want.is_none()) return got.is_none() ? "" : "expected an empty optional";
  if (got.is_none()) return "got an empty optional";
  if (want.is_tensor()) {
    if (!got.is_tensor()) return "expected a tensor, got a sequence";
    return compare_tensors(got.tensor, want.tensor, rtol, atol);
  }
  if (!got.is_sequence()) return "expected a sequence, got a tensor";
  if (got.sequence.size() != want.sequence.size())
    return fmt::format("sequence length {} != expected {}", got.sequence.size(), want.sequence.size());
  for (size_t i = 0; i < want.sequence.size(); ++i) {
    std::string r = compare_tensors(got.sequence[i], want.sequence[i], rtol, atol);
    if (!r.empty()) return fmt::format("sequence element {}: {}", i, r);
  }
  return "";
}

}  // namespace onyx::conformance
